//! The scheduler's thread: admit, step, report, until shut down.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use capstan_reader::{Cache, Decoding, Generation, PackedInput};

use super::prefix::PrefixCache;
use super::{Event, Shared, Ticket, Waiting, Work};
use crate::error::{panic_message, Error};
use capstan_reader::{prompt_piece, PassageCache, STABLE_CHUNK_ROWS};

/// A step has room for at least this many prompt tokens, even when decoding rows fill its
/// budget, so that prefill always progresses: twice [`STABLE_CHUNK_ROWS`], so that a piece of
/// at least that many leaves at least that many ([`prompt_piece`]).
const MIN_PREFILL_CHUNK: usize = 2 * STABLE_CHUNK_ROWS;

/// A running sequence.
struct Running {
    cache: Cache,
    decoding: Decoding,
    /// Tokens not yet fed: the prompt's unread part, or the last sampled token.
    pending: Vec<u32>,
    prompt_tokens: usize,
    /// The prompt, kept for the prefix cache until it has been read.
    prompt: Option<Vec<u32>>,
    reserve: usize,
    events: mpsc::Sender<Event>,
    cancel: Arc<std::sync::atomic::AtomicBool>,
    submitted: Instant,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
}

impl Running {
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// Ends the sequence: reports the generation (ignored if nobody listens).
    fn finish(mut self, shared: &Shared) {
        let elapsed = self.submitted.elapsed();
        let ttft = self
            .first_token
            .map_or(elapsed, |t| t.duration_since(self.submitted));
        let span = self.decoding.span_matches();
        let logprobs = self.decoding.take_logprobs();
        let (tokens, text, stop_reason) = self.decoding.finish();
        let generation = Generation {
            span,
            logprobs,
            tokens,
            text: Some(text),
            stop_reason,
            prompt_tokens: self.prompt_tokens,
            time_to_first_token: ttft,
            elapsed,
        };
        shared.stats.lock().expect("scheduler stats lock").finished += 1;
        let _ = self.events.send(Event::Done(generation));
    }
}

/// How a sequence left the running set.
enum Ending {
    Finished(Box<Running>),
    Scored {
        reserve: usize,
        events: mpsc::Sender<Event>,
        scores: Vec<capstan_reader::AnswerLikelihood>,
    },
    Failed {
        reserve: usize,
        events: mpsc::Sender<Event>,
        error: Error,
    },
}

/// The thread's body.
pub(super) fn run(shared: &Shared) {
    let mut running: Vec<Running> = Vec::new();
    let mut prefixes = shared.settings.prefix_cache.then(PrefixCache::new);
    if let (Some(cache), Some(store)) = (prefixes.as_mut(), &shared.store) {
        store.load_into(shared.model.model(), cache);
        let mut q = shared.queue.lock().expect("scheduler queue lock");
        while cache.tokens() > shared.settings.kv_tokens && cache.evict_one() {}
        q.cached = cache.tokens();
    }
    let mut passages = PassageCache::new(shared.settings.passage_cache_bytes);
    // Admitted scoring work, first come first served: one job between two steps, its scores
    // sent as soon as they are known. (Scoring every admitted job before answering any made
    // 16 concurrent span answers all wait for the last: median 16.7 s against 7.7 s one at a
    // time, and it held the running sequences' decoding for as long.)
    let mut scoring: VecDeque<(Vec<u32>, Vec<String>, Ticket)> = VecDeque::new();
    loop {
        let Some(admitted) = admit(shared, running.len() + scoring.len(), prefixes.as_mut()) else {
            if let (Some(cache), Some(store)) = (&prefixes, &shared.store) {
                store.save(cache);
            }
            break;
        };
        let mut ended = Vec::new();
        for Waiting { work, ticket } in admitted {
            let (request, params) = match work {
                Work::Generate(request, params) => (request, params),
                Work::Score { prompt, answers } => {
                    scoring.push_back((prompt, answers, ticket));
                    continue;
                }
            };
            match start(
                shared,
                request,
                params,
                ticket,
                prefixes.as_mut(),
                &mut passages,
            ) {
                Ok(r) if r.decoding.is_done() => ended.push(Ending::Finished(Box::new(r))),
                Ok(r) => running.push(r),
                Err((reserve, events, error)) => ended.push(Ending::Failed {
                    reserve,
                    events,
                    error,
                }),
            }
        }
        if let Some((prompt, answers, ticket)) = scoring.pop_front() {
            let scored = score(shared, &prompt, &answers, ticket, prefixes.as_mut());
            deliver(shared, vec![scored]);
        }
        // Sequences whose client left (or asked to stop) end before the step.
        let (gone, kept): (Vec<_>, Vec<_>) = running.into_iter().partition(Running::cancelled);
        running = kept;
        for mut r in gone {
            r.decoding.cancel();
            ended.push(Ending::Finished(Box::new(r)));
        }
        if !running.is_empty() {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                step(shared, &mut running, prefixes.as_mut())
            }));
            let failure = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(panic) => Some(format!("internal error: {}", panic_message(panic.as_ref()))),
            };
            if let Some(reason) = failure {
                // The caches of every sequence in the step are now in an unknown state.
                ended.extend(running.drain(..).map(|r| Ending::Failed {
                    reserve: r.reserve,
                    events: r.events,
                    error: Error::Panic(reason.clone()),
                }));
            }
            let (done, kept): (Vec<_>, Vec<_>) =
                running.into_iter().partition(|r| r.decoding.is_done());
            running = kept;
            ended.extend(done.into_iter().map(|r| Ending::Finished(Box::new(r))));
        }
        deliver(shared, ended);
    }
    shared.stopped.store(true, Ordering::SeqCst);
}

/// Gives the ended sequences' slots and reservations back, then reports to their clients:
/// whoever sees a sequence end sees the scheduler without it.
fn deliver(shared: &Shared, ended: Vec<Ending>) {
    {
        let mut q = shared.queue.lock().expect("scheduler queue lock");
        for e in &ended {
            q.slots -= 1;
            q.kv_used -= match e {
                Ending::Finished(r) => r.reserve,
                Ending::Failed { reserve, .. } | Ending::Scored { reserve, .. } => *reserve,
            };
        }
    }
    for e in ended {
        match e {
            Ending::Finished(r) => r.finish(shared),
            Ending::Failed { events, error, .. } => {
                let _ = events.send(Event::Failed(error));
            }
            Ending::Scored { events, scores, .. } => {
                shared.stats.lock().expect("scheduler stats lock").finished += 1;
                let _ = events.send(Event::Scored(scores));
            }
        }
    }
}

/// The sequences admitted since the last call; waits while nothing runs and nothing was
/// admitted. `None`: shut down.
fn admit(
    shared: &Shared,
    running: usize,
    mut prefixes: Option<&mut PrefixCache>,
) -> Option<Vec<Waiting>> {
    let mut q = shared.queue.lock().expect("scheduler queue lock");
    loop {
        // Cached prefixes make room for the next waiting sequence, least recently used first.
        if let Some(cache) = prefixes.as_deref_mut() {
            while let Some(reserve) = q.waiting.front().map(|w| w.ticket.reserve) {
                let full = q.slots >= shared.settings.max_batch;
                if full || q.fits(&shared.settings, reserve) || !cache.evict_one() {
                    break;
                }
                q.cached = cache.tokens();
            }
            q.cached = cache.tokens();
            let mut stats = shared.stats.lock().expect("scheduler stats lock");
            stats.prefix_cached_tokens = cache.tokens();
            stats.prefix_evicted_blocks = cache.evicted;
        }
        q.promote(&shared.settings);
        let admitted = std::mem::take(&mut q.admitted);
        if running > 0 || !admitted.is_empty() {
            return Some(admitted);
        }
        if q.shutdown {
            return None;
        }
        q = shared.wake.wait(q).expect("scheduler queue lock");
    }
}

type StartError = (usize, mpsc::Sender<Event>, Error);

/// Scores candidate answers at once, between steps (the running sequences wait for it). The
/// prompt starts from the longest run of its cached blocks, and its blocks join the prefix
/// cache after (the instruction and worked example every question shares, a passage asked
/// about again).
fn score(
    shared: &Shared,
    prompt: &[u32],
    answers: &[String],
    ticket: Ticket,
    mut prefixes: Option<&mut PrefixCache>,
) -> Ending {
    let Ticket {
        reserve, events, ..
    } = ticket;
    let model = shared.model.model();
    let mut cache = Cache::new(model);
    cache.reserve(capstan_reader::scoring_cache_tokens(prompt.len()));
    if let Some(p) = prefixes.as_deref_mut() {
        if let Err(e) = p.load_into(model, prompt, &mut cache) {
            return Ending::Failed {
                reserve,
                events,
                error: e.into(),
            };
        }
    }
    shared.stats.lock().expect("scheduler stats lock").admitted(
        ticket.submitted.elapsed(),
        prompt.len(),
        cache.seq_len(),
    );
    let texts: Vec<&str> = answers.iter().map(String::as_str).collect();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        shared
            .model
            .answer_likelihoods_after(prompt, &texts, &mut cache)
    }));
    if let (Ok(Ok(_)), Some(p)) = (&outcome, prefixes) {
        keep_prompt(shared, p, prompt, &cache);
    }
    match outcome {
        Ok(Ok(scores)) => Ending::Scored {
            reserve,
            events,
            scores,
        },
        Ok(Err(e)) => Ending::Failed {
            reserve,
            events,
            error: e.into(),
        },
        Err(p) => Ending::Failed {
            reserve,
            events,
            error: Error::Panic(panic_message(p.as_ref()).to_string()),
        },
    }
}

/// Keeps the whole blocks of a prompt `cache` has read in the prefix cache, evicting the least
/// recently used while the cache and the running sequences' reservations exceed the budget.
fn keep_prompt(shared: &Shared, prefixes: &mut PrefixCache, prompt: &[u32], cache: &Cache) {
    if prefixes.insert(shared.model.model(), prompt, cache) == 0 {
        return;
    }
    let mut q = shared.queue.lock().expect("scheduler queue lock");
    while q.kv_used + prefixes.tokens() > shared.settings.kv_tokens && prefixes.evict_one() {}
    q.cached = prefixes.tokens();
    drop(q);
    shared
        .stats
        .lock()
        .expect("scheduler stats lock")
        .prefix_evicted_blocks = prefixes.evicted;
}

/// A new running sequence (its encoder context computed for CAPE).
fn start(
    shared: &Shared,
    request: capstan_reader::Request,
    params: capstan_reader::GenerationParams,
    w: Ticket,
    prefixes: Option<&mut PrefixCache>,
    passages: &mut PassageCache,
) -> Result<Running, StartError> {
    let model = shared.model.model();
    let mut cache = Cache::new(model);
    // The decoder's share of the reservation: its buffers are allocated once at that size.
    cache.reserve(request.prompt.len() + params.max_new_tokens);
    // The longest cached prefix of the prompt (none with an encoder context: CAPE's decoder
    // reads the encoder's states too).
    let mut hit = 0;
    let cacheable = prefixes.is_some() && request.encoder_chunks.is_empty();
    if let Some(prefixes) = prefixes.filter(|_| cacheable) {
        match prefixes.load_into(model, &request.prompt, &mut cache) {
            Ok(n) => hit = n,
            Err(e) => return Err((w.reserve, w.events, Error::from(e))),
        }
    }
    if !request.encoder_chunks.is_empty() {
        let set = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.set_encoder_context_cached(
                std::slice::from_ref(&request.encoder_chunks),
                shared.model.pad_id(),
                &mut cache,
                passages,
            )
        }));
        shared.stats.lock().expect("scheduler stats lock").passages = passages.stats();
        let err = match set {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(Error::from(e)),
            Err(p) => Some(Error::Panic(panic_message(p.as_ref()).to_string())),
        };
        if let Some(e) = err {
            return Err((w.reserve, w.events, e));
        }
    }
    shared.stats.lock().expect("scheduler stats lock").admitted(
        w.submitted.elapsed(),
        request.prompt.len(),
        hit,
    );
    Ok(Running {
        cache,
        decoding: Decoding::new(&request.prompt, params),
        prompt_tokens: request.prompt.len(),
        prompt: cacheable.then(|| request.prompt.clone()),
        pending: request.prompt[hit..].to_vec(),
        reserve: w.reserve,
        events: w.events,
        cancel: w.cancel,
        submitted: w.submitted,
        first_token: None,
        last_token: None,
    })
}

/// One packed forward over the running sequences, then one token for each that finished its
/// prompt (or was decoding).
fn step(
    shared: &Shared,
    running: &mut [Running],
    mut prefixes: Option<&mut PrefixCache>,
) -> Result<(), Error> {
    let budget = shared.settings.step_tokens;
    let decoding = running.iter().filter(|r| r.pending.len() == 1).count();
    let mut left = budget.saturating_sub(decoding).max(MIN_PREFILL_CHUNK);
    // How many pending tokens each sequence feeds this step (0: waits for the next).
    let feed: Vec<usize> = running
        .iter()
        .map(|r| {
            if r.pending.len() == 1 {
                1
            } else {
                let n = prompt_piece(r.pending.len(), left);
                left -= n;
                n
            }
        })
        .collect();
    let fed: Vec<usize> = (0..running.len()).filter(|&i| feed[i] > 0).collect();
    let logits = {
        let mut inputs: Vec<PackedInput> = running
            .iter_mut()
            .zip(&feed)
            .filter(|(_, &n)| n > 0)
            .map(|(r, &n)| PackedInput {
                tokens: &r.pending[..n],
                cache: &mut r.cache,
            })
            .collect();
        shared.model.model().forward_packed(&mut inputs)?
    };
    let rows = logits
        .to_vec2::<f32>()
        .map_err(capstan_reader::Error::from)?;
    let tokenizer = Some(shared.model.tokenizer());
    let now = Instant::now();
    let mut new_tokens = 0;
    let mut gaps = Vec::new();
    let mut firsts = Vec::new();
    for (&i, mut row) in fed.iter().zip(rows) {
        let r = &mut running[i];
        r.pending.drain(..feed[i]);
        if !r.pending.is_empty() {
            continue; // more prompt to read: its logits are not a prediction yet
        }
        // The prompt is read: its blocks join the prefix cache (within the budget).
        if let (Some(prompt), Some(cache)) = (r.prompt.take(), prefixes.as_deref_mut()) {
            keep_prompt(shared, cache, &prompt, &r.cache);
        }
        let t = r.decoding.push(&mut row, tokenizer)?;
        new_tokens += 1;
        match r.last_token {
            Some(prev) => gaps.push(now.duration_since(prev)),
            None => {
                r.first_token = Some(now);
                firsts.push(now.duration_since(r.submitted));
            }
        }
        r.last_token = Some(now);
        r.pending.push(t.token);
        if r.events.send(Event::Token(t)).is_err() {
            r.decoding.cancel();
        }
    }
    shared.stats.lock().expect("scheduler stats lock").stepped(
        fed.len(),
        new_tokens,
        &firsts,
        &gaps,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_cut_in_pieces_that_read_as_the_whole_prompt() {
        for pending in 1..300 {
            for left in 0..300 {
                let n = prompt_piece(pending, left);
                assert!(n <= pending.min(left), "{pending} {left}: {n}");
                if n < pending {
                    assert!(
                        n == 0 || (n >= STABLE_CHUNK_ROWS && pending - n >= STABLE_CHUNK_ROWS),
                        "{pending} pending, {left} left: a piece of {n}"
                    );
                }
            }
            // A step always has room for a piece.
            assert!(prompt_piece(pending, MIN_PREFILL_CHUNK) > 0, "{pending}");
        }
    }
}
