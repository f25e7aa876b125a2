//! Model work off the async runtime: worker threads fed by bounded queues.
//!
//! A request is admitted only if its queue has room (`try_send`); a full
//! queue fails fast as [`Error::Overloaded`] (HTTP 503 with Retry-After)
//! instead of hanging. Generative reading has its own queue and workers, so a
//! long generation never delays searches and extractive answers; those workers
//! retrieve and build the prompt, then wait on the reader's [`Scheduler`](crate::Scheduler),
//! which batches every sequence in flight into one step. Replies travel back on
//! oneshot channels; streamed text on an unbounded channel. A client that left
//! (closed stream or dropped reply) stops its generation at the next step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_reader::Flow;
use capstan_retriever::{Filter, Hit, SearchOptions};
use tokio::sync::{mpsc, oneshot};

use crate::error::{guarded, Error, Result};
use crate::pipeline::{Answer, Pipeline, QaRequest, ReaderKind};

type Reply<T> = oneshot::Sender<Result<T>>;

/// Where a reply arrives.
pub type Pending<T> = oneshot::Receiver<Result<T>>;

/// Embedding vectors and the number of tokens they took.
pub type Embedded = (Vec<Vec<f32>>, usize);

enum Job {
    Qa {
        request: Box<QaRequest>,
        text: Option<mpsc::UnboundedSender<String>>,
        reply: Reply<Answer>,
    },
    Search {
        query: String,
        options: SearchOptions,
        filter: Option<Filter>,
        reply: Reply<Vec<Hit>>,
    },
    Embed {
        texts: Vec<String>,
        reply: Reply<Embedded>,
    },
}

impl Job {
    /// Whether nobody waits for the result any more.
    fn abandoned(&self) -> bool {
        match self {
            Job::Qa { reply, .. } => reply.is_closed(),
            Job::Search { reply, .. } => reply.is_closed(),
            Job::Embed { reply, .. } => reply.is_closed(),
        }
    }

    /// Answers [`Error::Expired`] without running.
    fn expire(self, queue: &'static str, waited: Duration, deadline: Duration) {
        let error = || Error::Expired {
            queue,
            waited_ms: waited.as_millis() as u64,
            deadline_ms: deadline.as_millis() as u64,
        };
        match self {
            Job::Qa { reply, .. } => drop(reply.send(Err(error()))),
            Job::Search { reply, .. } => drop(reply.send(Err(error()))),
            Job::Embed { reply, .. } => drop(reply.send(Err(error()))),
        }
    }
}

/// A job and when it entered its queue.
struct Queued {
    job: Job,
    since: Instant,
}

struct Queue {
    tx: SyncSender<Queued>,
    depth: Arc<AtomicUsize>,
    name: &'static str,
}

impl Queue {
    fn start(
        name: &'static str,
        workers: usize,
        capacity: usize,
        deadline: Duration,
        pipeline: Arc<Pipeline>,
    ) -> Self {
        let (tx, rx) = sync_channel::<Queued>(capacity);
        let rx = Arc::new(Mutex::new(rx));
        let depth = Arc::new(AtomicUsize::new(0));
        for i in 0..workers.max(1) {
            let rx = rx.clone();
            let depth = depth.clone();
            let pipeline = pipeline.clone();
            std::thread::Builder::new()
                .name(format!("capstan-{name}-{i}"))
                .spawn(move || worker(name, &rx, &depth, deadline, &pipeline))
                .expect("spawning a worker thread");
        }
        Self { tx, depth, name }
    }

    fn submit(&self, job: Job) -> Result<()> {
        self.depth.fetch_add(1, Ordering::SeqCst);
        let queued = Queued {
            job,
            since: Instant::now(),
        };
        match self.tx.try_send(queued) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.depth.fetch_sub(1, Ordering::SeqCst);
                Err(Error::Overloaded { queue: self.name })
            }
        }
    }
}

fn worker(
    queue: &'static str,
    rx: &Mutex<Receiver<Queued>>,
    depth: &AtomicUsize,
    deadline: Duration,
    pipeline: &Pipeline,
) {
    loop {
        let Queued { job, since } = {
            let guard = rx.lock().expect("queue lock");
            match guard.recv() {
                Ok(queued) => queued,
                Err(_) => return,
            }
        };
        depth.fetch_sub(1, Ordering::SeqCst);
        if job.abandoned() {
            continue;
        }
        // Work whose client has most likely given up (or will before it is
        // done) is not started: under overload the queue drains at the speed
        // of a reply instead of a computation.
        let waited = since.elapsed();
        if waited > deadline {
            job.expire(queue, waited, deadline);
            continue;
        }
        // A panic fails its own request (500) instead of killing the worker:
        // with every worker dead the queue would refuse all work for good.
        match job {
            Job::Qa {
                mut request,
                text,
                reply,
            } => {
                // The rest of the wait allowed is the scheduler's to hold.
                request.deadline = Some(crate::scheduler::Deadline {
                    queued: since,
                    wait: deadline,
                });
                let result = guarded(|| {
                    pipeline.answer(&request, |piece| match &text {
                        Some(tx) if tx.send(piece.to_string()).is_err() => Flow::Stop,
                        _ if reply.is_closed() => Flow::Stop,
                        _ => Flow::Continue,
                    })
                });
                let _ = reply.send(result);
            }
            Job::Search {
                query,
                options,
                filter,
                reply,
            } => {
                let result = guarded(|| {
                    pipeline
                        .retriever()
                        .search_with(&query, None, &options, filter.as_ref())
                        .map_err(Into::into)
                });
                let _ = reply.send(result);
            }
            Job::Embed { texts, reply } => {
                let result = guarded(|| {
                    let encoder = pipeline.retriever().encoder()?;
                    let tokens = texts
                        .iter()
                        .map(|t| {
                            encoder
                                .tokenizer()
                                .encode(t.as_str(), true)
                                .map(|e| e.len())
                                .unwrap_or(0)
                        })
                        .sum();
                    encoder
                        .embed(&texts)
                        .map(|v| (v, tokens))
                        .map_err(|e| capstan_indexer::Error::from(e).into())
                });
                let _ = reply.send(result);
            }
        }
    }
}

/// Sizes of the engine.
#[derive(Debug, Clone, Copy)]
pub struct EngineSettings {
    /// Workers for retrieval and extractive answers.
    pub workers: usize,
    /// Requests that may wait for those workers.
    pub queue: usize,
    /// Workers for `/v1/embeddings`: a queue of their own, so that a burst of large
    /// embedding requests never stands in front of a search or an extractive answer.
    pub embed_workers: usize,
    /// Embedding requests that may wait.
    pub embed_queue: usize,
    /// Generative requests in flight: each worker retrieves, builds the prompt and waits on
    /// the scheduler, so this bounds the sequences a scheduler can batch.
    pub generations: usize,
    /// Requests that may wait for a generation slot.
    pub generation_queue: usize,
    /// Longest wait in a queue: a request still queued after it is answered
    /// [`Error::Expired`] without running.
    pub queue_deadline: Duration,
}

/// Handle to the worker pools; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    fast: Arc<Queue>,
    embed: Arc<Queue>,
    generate: Arc<Queue>,
    pipeline: Arc<Pipeline>,
}

impl Engine {
    /// Starts the worker threads.
    pub fn start(pipeline: Arc<Pipeline>, settings: EngineSettings) -> Self {
        Self {
            fast: Arc::new(Queue::start(
                "fast",
                settings.workers,
                settings.queue,
                settings.queue_deadline,
                pipeline.clone(),
            )),
            embed: Arc::new(Queue::start(
                "embed",
                settings.embed_workers,
                settings.embed_queue,
                settings.queue_deadline,
                pipeline.clone(),
            )),
            generate: Arc::new(Queue::start(
                "generate",
                settings.generations,
                settings.generation_queue,
                settings.queue_deadline,
                pipeline.clone(),
            )),
            pipeline,
        }
    }

    /// The pipeline the workers run.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Requests waiting in each queue.
    pub fn queue_depths(&self) -> [(&'static str, usize); 3] {
        [
            (self.fast.name, self.fast.depth.load(Ordering::SeqCst)),
            (self.embed.name, self.embed.depth.load(Ordering::SeqCst)),
            (
                self.generate.name,
                self.generate.depth.load(Ordering::SeqCst),
            ),
        ]
    }

    /// Answers a question; with `text`, generated pieces are streamed there.
    pub fn qa(
        &self,
        request: QaRequest,
        text: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<Pending<Answer>> {
        let (reply, rx) = oneshot::channel();
        let queue = if request.reader == ReaderKind::Extractive {
            &self.fast
        } else {
            &self.generate
        };
        queue.submit(Job::Qa {
            request: Box::new(request),
            text,
            reply,
        })?;
        Ok(rx)
    }

    /// Retrieves passages (whose documents meet `filter`).
    pub fn search(
        &self,
        query: String,
        options: SearchOptions,
        filter: Option<Filter>,
    ) -> Result<Pending<Vec<Hit>>> {
        let (reply, rx) = oneshot::channel();
        self.fast.submit(Job::Search {
            query,
            options,
            filter,
            reply,
        })?;
        Ok(rx)
    }

    /// Embeds texts with the index's encoder; also returns the token count.
    pub fn embed(&self, texts: Vec<String>) -> Result<Pending<Embedded>> {
        let (reply, rx) = oneshot::channel();
        self.embed.submit(Job::Embed { texts, reply })?;
        Ok(rx)
    }
}
