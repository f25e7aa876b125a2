//! Continuous batching of generation.
//!
//! A [`Scheduler`] owns one generative model on its own thread. Every step runs one packed
//! forward ([`capstan_reader::Llama::forward_packed`]) over every running sequence: one row per
//! decoding sequence plus prompt chunks of sequences still prefilling, up to a token budget per
//! step, so a long prompt is read over several steps while everyone else keeps decoding.
//! Sequences join and leave between steps; each has its own sampling parameters, stops, token
//! limit and event stream, and a sequence whose receiver is gone is dropped at the next step.
//!
//! **KV memory: slots with a token budget.** Each sequence's KV cache is its own buffer
//! (contiguous per layer, appended in place), not pages in a shared pool: on the CPU reference
//! path attention reads one contiguous buffer per sequence, and what paging buys on a GPU
//! (no fragmentation between many short-lived sequences of unknown length) matters less when a
//! sequence's bound is known at admission. That bound is reserved then: prompt tokens, encoder
//! tokens (CAPE) and `max_new_tokens`, against `kv_tokens` in all; a sequence is admitted when
//! its reservation fits and fewer than `max_batch` run, in arrival order (no overtaking).
//! Past that it waits in a bounded queue; past the queue, [`Error::Overloaded`].
//!
//! **Scoring** ([`Scheduler::score`]): ranking span answers asks the model how likely it finds
//! each candidate after a prompt. That work is admitted by the same rule and counted against
//! the same budget (the prompt and a copy of it per candidate of a pass), and runs on the
//! scheduler's thread between steps, one job between two steps in arrival order, each answered
//! as soon as it is scored, so that no request reaches the model past admission.
//!
//! **Prefix caching** ([`prefix`]): the KV of prompts read before is kept in 64-token blocks
//! keyed by everything up to them; a new prompt starts from its longest cached prefix (copied
//! into its own cache) and reads only the rest. The blocks count against `kv_tokens`; the
//! least recently used give way when a sequence waits for room.

pub mod prefix;
mod prefix_store;
mod stats;
mod step;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use capstan_reader::{
    scoring_kv_tokens, AnswerLikelihood, DecodedToken, Flow, Generation, GenerationParams,
    LanguageModel, Request,
};

use crate::error::{Error, Result};
pub use prefix_store::PrefixStore;
pub use stats::{render_schedulers, SchedulerStats};

/// Sizes of a scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// Sequences running at once (1 = no batching: one sequence at a time).
    pub max_batch: usize,
    /// KV cache budget in tokens, reserved per sequence at admission.
    pub kv_tokens: usize,
    /// Tokens per step: one per decoding sequence, the rest for prompt chunks.
    pub step_tokens: usize,
    /// Sequences that may wait for admission.
    pub queue: usize,
    /// Keep the KV of prompts read before and start a prompt from its longest cached
    /// prefix ([`prefix`]); the blocks count against `kv_tokens`.
    pub prefix_cache: bool,
    /// Bytes of CAPE encoder states kept by passage ([`capstan_reader::PassageCache`]; 0:
    /// none kept).
    pub passage_cache_bytes: usize,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            max_batch: 64,
            kv_tokens: 1 << 17,
            step_tokens: 512,
            queue: 256,
            prefix_cache: true,
            passage_cache_bytes: 256 << 20,
        }
    }
}

/// What a running sequence reports.
#[derive(Debug)]
pub enum Event {
    /// A new token (and its text).
    Token(DecodedToken),
    /// The sequence ended.
    Done(Generation),
    /// The candidates of a [`Scheduler::score`] request, scored in their order.
    Scored(Vec<AnswerLikelihood>),
    /// The sequence failed (the step it was in failed, or its encoder context did).
    Failed(Error),
}

/// A submitted sequence: its events, in order. Dropping it cancels the sequence.
#[derive(Debug)]
pub struct Sequence {
    events: mpsc::Receiver<Event>,
    cancel: Arc<AtomicBool>,
}

impl Sequence {
    /// The next event; `None` once the scheduler is gone.
    pub fn next_event(&self) -> Option<Event> {
        self.events.recv().ok()
    }

    /// Asks the scheduler to drop the sequence at its next step.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// What an admitted request asks of the model.
enum Work {
    /// Generate after a prompt.
    Generate(Request, GenerationParams),
    /// Score candidate answers after a prompt ([`LanguageModel::answer_likelihoods`]).
    Score {
        prompt: Vec<u32>,
        answers: Vec<String>,
    },
}

impl Work {
    fn prompt_len(&self) -> usize {
        match self {
            Work::Generate(request, _) => request.prompt.len(),
            Work::Score { prompt, .. } => prompt.len(),
        }
    }
}

/// A request's deadline: when its wait ends, and the bound it came from (for the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// When the request was queued.
    pub queued: Instant,
    /// How long it may wait.
    pub wait: std::time::Duration,
}

/// A request's place in the scheduler: what it holds of the KV budget, where its events go.
struct Ticket {
    reserve: usize,
    events: mpsc::Sender<Event>,
    cancel: Arc<AtomicBool>,
    submitted: Instant,
    deadline: Option<Deadline>,
}

/// A request waiting for admission.
struct Waiting {
    work: Work,
    ticket: Ticket,
}

/// What submitters and the scheduler thread share: admission happens here, under one lock,
/// so that a burst is admitted, queued or refused by the same rule whenever the thread runs.
struct Queue {
    /// Admitted, not yet started by the thread.
    admitted: Vec<Waiting>,
    /// Waiting for a slot or KV budget, in arrival order.
    waiting: VecDeque<Waiting>,
    /// Sequences admitted and not yet ended.
    slots: usize,
    /// KV tokens reserved by them.
    kv_used: usize,
    /// KV tokens held by the prefix cache (the scheduler thread evicts them to admit).
    cached: usize,
    shutdown: bool,
}

impl Queue {
    fn fits(&self, settings: &SchedulerSettings, reserve: usize) -> bool {
        self.slots < settings.max_batch
            && self.kv_used + self.cached + reserve <= settings.kv_tokens
    }

    fn admit(&mut self, w: Waiting) {
        self.slots += 1;
        self.kv_used += w.ticket.reserve;
        self.admitted.push(w);
    }

    /// Moves waiting sequences that now fit to `admitted`, in order (no overtaking); those
    /// cancelled are dropped, and those past their deadline refused.
    fn promote(&mut self, settings: &SchedulerSettings) {
        let now = Instant::now();
        self.waiting.retain(|w| {
            if w.ticket.cancel.load(Ordering::SeqCst) {
                return false;
            }
            match w.ticket.deadline {
                Some(d) if now.duration_since(d.queued) > d.wait => {
                    let _ = w.ticket.events.send(Event::Failed(Error::Expired {
                        queue: "generate",
                        waited_ms: now.duration_since(d.queued).as_millis() as u64,
                        deadline_ms: d.wait.as_millis() as u64,
                    }));
                    false
                }
                _ => true,
            }
        });
        while let Some(w) = self.waiting.front() {
            if !self.fits(settings, w.ticket.reserve) {
                break;
            }
            let w = self.waiting.pop_front().expect("front exists");
            self.admit(w);
        }
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    settings: SchedulerSettings,
    stats: Mutex<SchedulerStats>,
    model: Arc<LanguageModel>,
    /// Set when the thread ended (a panic outside a step).
    stopped: AtomicBool,
    /// Where the prefix cache is kept between runs, if anywhere.
    store: Option<PrefixStore>,
}

/// Stops the thread when the last [`Scheduler`] clone is dropped; with a [`PrefixStore`],
/// waits for it to write the prefix cache.
struct Shutdown(Arc<Shared>, Option<std::thread::JoinHandle<()>>);

impl Drop for Shutdown {
    fn drop(&mut self) {
        self.0.queue.lock().expect("scheduler queue lock").shutdown = true;
        self.0.wake.notify_all();
        if self.0.store.is_some() {
            if let Some(thread) = self.1.take() {
                let _ = thread.join();
            }
        }
    }
}

/// A continuous-batching scheduler for one generative model; cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
    _shutdown: Arc<Shutdown>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("settings", &self.shared.settings)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Starts the scheduler's thread, named `capstan-{name}`.
    pub fn start(name: &str, model: Arc<LanguageModel>, settings: SchedulerSettings) -> Self {
        Self::start_with_store(name, model, settings, None)
    }

    /// As [`Scheduler::start`], the prefix cache read from `store` at the start and written
    /// back when the last clone is dropped (which then waits for the write): for one-shot
    /// runs, which would otherwise start from an empty cache every time.
    pub fn start_with_store(
        name: &str,
        model: Arc<LanguageModel>,
        settings: SchedulerSettings,
        store: Option<PrefixStore>,
    ) -> Self {
        let settings = SchedulerSettings {
            max_batch: settings.max_batch.max(1),
            kv_tokens: settings.kv_tokens.max(1),
            step_tokens: settings.step_tokens.max(1),
            ..settings
        };
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                admitted: Vec::new(),
                waiting: VecDeque::new(),
                slots: 0,
                kv_used: 0,
                cached: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            settings,
            stats: Mutex::new(SchedulerStats::new(settings)),
            model,
            stopped: AtomicBool::new(false),
            store,
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("capstan-{name}"))
            .spawn(move || step::run(&thread_shared))
            .expect("spawning the scheduler thread");
        Self {
            _shutdown: Arc::new(Shutdown(shared.clone(), Some(thread))),
            shared,
        }
    }

    /// The model it runs.
    pub fn model(&self) -> &LanguageModel {
        &self.shared.model
    }

    /// Its sizes.
    pub fn settings(&self) -> SchedulerSettings {
        self.shared.settings
    }

    /// A snapshot of its counters and histograms; the gauges (running, waiting, KV used) are
    /// read from the admission state itself.
    pub fn stats(&self) -> SchedulerStats {
        let mut stats = self
            .shared
            .stats
            .lock()
            .expect("scheduler stats lock")
            .clone();
        let q = self.shared.queue.lock().expect("scheduler queue lock");
        stats.running = q.slots - q.admitted.len();
        stats.waiting = q.waiting.len();
        stats.kv_used = q.kv_used;
        stats.prefix_cached_tokens = q.cached;
        stats
    }

    /// Queues a sequence. Fails fast when the queue is full, when the sequence could never fit
    /// the KV budget, and on an empty prompt.
    pub fn submit(&self, request: Request, params: GenerationParams) -> Result<Sequence> {
        self.submit_until(request, params, None)
    }

    /// [`Scheduler::submit`], refused ([`Error::Expired`]) if still waiting for admission past
    /// `deadline`. A sequence reserves its prompt, encoder tokens and new tokens.
    fn submit_until(
        &self,
        request: Request,
        params: GenerationParams,
        deadline: Option<Deadline>,
    ) -> Result<Sequence> {
        let encoder: usize = request.encoder_chunks.iter().map(Vec::len).sum();
        let reserve = request.prompt.len() + encoder + params.max_new_tokens;
        self.enqueue(Work::Generate(request, params), reserve, deadline)
    }

    /// The model's likelihood of each of `answers` as its reply to `prompt`
    /// ([`LanguageModel::answer_likelihoods`]), admitted, queued or refused as a sequence is.
    pub fn score(&self, prompt: Vec<u32>, answers: Vec<String>) -> Result<Vec<AnswerLikelihood>> {
        self.score_until(prompt, answers, None)
    }

    /// [`Scheduler::score`], refused ([`Error::Expired`]) if still waiting past `deadline`.
    pub fn score_until(
        &self,
        prompt: Vec<u32>,
        answers: Vec<String>,
        deadline: Option<Deadline>,
    ) -> Result<Vec<AnswerLikelihood>> {
        if answers.is_empty() {
            return Ok(Vec::new());
        }
        let reserve = scoring_kv_tokens(prompt.len(), answers.len());
        let seq = self.enqueue(Work::Score { prompt, answers }, reserve, deadline)?;
        match seq.next_event() {
            Some(Event::Scored(scores)) => Ok(scores),
            Some(Event::Failed(e)) => Err(e),
            Some(Event::Token(_) | Event::Done(_)) => Err(Error::Panic(
                "a scoring request was answered with a generation".into(),
            )),
            None => Err(Error::SchedulerStopped),
        }
    }

    /// Admits `work` (holding `reserve` KV tokens), queues it, or refuses it.
    fn enqueue(&self, work: Work, reserve: usize, deadline: Option<Deadline>) -> Result<Sequence> {
        if work.prompt_len() == 0 {
            return Err(capstan_reader::Error::InvalidInput {
                reason: "empty prompt".into(),
            }
            .into());
        }
        if self.shared.stopped.load(Ordering::SeqCst) {
            return Err(Error::SchedulerStopped);
        }
        let budget = self.shared.settings.kv_tokens;
        if reserve > budget {
            return Err(Error::TooLarge {
                need: reserve,
                budget,
            });
        }
        let (events, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        {
            let settings = &self.shared.settings;
            let mut q = self.shared.queue.lock().expect("scheduler queue lock");
            q.promote(settings);
            let w = Waiting {
                work,
                ticket: Ticket {
                    reserve,
                    events,
                    cancel: cancel.clone(),
                    submitted: Instant::now(),
                    deadline,
                },
            };
            if q.waiting.is_empty() && q.fits(settings, reserve) {
                q.admit(w);
            } else if q.waiting.len() < settings.queue {
                q.waiting.push_back(w);
            } else {
                drop(q);
                self.shared
                    .stats
                    .lock()
                    .expect("scheduler stats lock")
                    .rejected += 1;
                return Err(Error::Overloaded { queue: "generate" });
            }
        }
        self.shared.wake.notify_all();
        Ok(Sequence { events: rx, cancel })
    }

    /// Submits and waits: `on_token(id, text)` sees every token as it comes and may stop the
    /// sequence ([`Flow::Stop`]: it ends as cancelled, with what it has).
    pub fn generate_stream(
        &self,
        request: Request,
        params: GenerationParams,
        on_token: impl FnMut(u32, Option<&str>) -> Flow,
    ) -> Result<Generation> {
        self.generate_stream_until(request, params, None, on_token)
    }

    /// [`Scheduler::generate_stream`], refused ([`Error::Expired`]) if still waiting for
    /// admission past `deadline`.
    pub fn generate_stream_until(
        &self,
        request: Request,
        params: GenerationParams,
        deadline: Option<Deadline>,
        mut on_token: impl FnMut(u32, Option<&str>) -> Flow,
    ) -> Result<Generation> {
        let seq = self.submit_until(request, params, deadline)?;
        loop {
            match seq.next_event() {
                Some(Event::Token(t)) => {
                    if on_token(t.token, t.piece.as_deref()) == Flow::Stop {
                        seq.cancel();
                    }
                }
                Some(Event::Done(g)) => return Ok(g),
                Some(Event::Failed(e)) => return Err(e),
                Some(Event::Scored(_)) => {
                    return Err(Error::Panic("a generation was answered with scores".into()))
                }
                None => return Err(Error::SchedulerStopped),
            }
        }
    }

    /// Submits and waits for the whole generation.
    pub fn generate(&self, request: Request, params: GenerationParams) -> Result<Generation> {
        self.generate_stream(request, params, |_, _| Flow::Continue)
    }
}
