//! End-to-end: `capstan serve` under load and at its edges: bursts batched, queued or refused
//! (503 + Retry-After) and never lost, deadlines, slow clients, and graceful shutdown on
//! SIGTERM with a request in flight.

mod common;
mod http;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{questions, s, smollm2};
use http::*;
use serde_json::{json, Value};

#[test]
fn a_search_does_not_wait_behind_a_burst_of_embeddings() {
    let f = fixture();
    // The queue deadline is not what this test is about.
    let srv = Server::start(&f.index, &["--queue-timeout", "600"]);
    let qs = questions(&f.data);
    let text = qs.join(" ");
    let port = srv.port;
    let started = Instant::now();
    let burst: Vec<_> = (0..6)
        .map(|i| {
            let body = json!({"input": vec![format!("{i} {text}"); 48]});
            std::thread::spawn(move || {
                let r = try_request(
                    port,
                    "POST",
                    "/v1/embeddings",
                    &[("Content-Type", "application/json")],
                    Some(body.to_string().as_bytes()),
                )
                .unwrap();
                (r.status, started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let hits = srv
        .post("/v1/search", &json!({"query": qs[0], "k": 5}))
        .ok_json();
    let search = t.elapsed();
    assert!(!hits["hits"].as_array().unwrap().is_empty(), "{hits}");
    let done: Vec<_> = burst.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(done.iter().all(|(status, _)| *status == 200), "{done:?}");
    let burst_time = done.iter().map(|(_, d)| *d).max().unwrap();
    eprintln!("search {search:?} during an embedding burst of {burst_time:?}");
    // Behind the burst, the search would have waited for most of it.
    assert!(
        search * 3 < burst_time,
        "search took {search:?} during an embedding burst of {burst_time:?}"
    );
}

#[test]
fn overload_gets_503_with_retry_after() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--workers", "1", "--queue", "1"]);
    let qs = questions(&f.data);
    let requests = (0..48)
        .map(|i| {
            let q = qs[i % qs.len()].clone();
            match i % 4 {
                0 => ("/v1/search", json!({"query": q, "k": 20})),
                // A slow one (~0.1 s of encoding) keeps the worker busy.
                1 => ("/v1/embeddings", json!({"input": vec![q; 64]})),
                2 => ("/v1/qa", json!({"question": q, "k": 20, "stream": true})),
                _ => ("/v1/qa", json!({"question": q, "k": 20})),
            }
        })
        .collect();
    let results = burst(srv.port, requests);
    let mut ok = 0;
    let mut rejected = 0;
    for (path, r) in &results {
        match r.status {
            200 => ok += 1,
            503 => {
                rejected += 1;
                let (_, kind) = assert_client_error_body(path, r);
                assert_eq!(kind, "overloaded");
                let retry = r.header("retry-after").expect("503 carries Retry-After");
                assert!(
                    retry.parse::<u64>().is_ok_and(|s| s >= 1),
                    "Retry-After {retry:?}"
                );
            }
            other => panic!("{path}: unexpected {other}: {}", r.text()),
        }
    }
    eprintln!("overload: {ok} served, {rejected} refused");
    assert!(ok >= 1, "nothing was served");
    assert!(
        rejected >= 1,
        "no request was refused with --workers 1 --queue 1 ({ok} served)"
    );
    // Once the burst is over the server serves again, and counted the refusals.
    let a = srv.post("/v1/qa", &json!({"question": qs[0]})).ok_json();
    assert!(!a["answer"].as_str().unwrap().is_empty());
    let metrics = srv.get("/metrics").text();
    assert!(
        metrics.contains(&format!("capstan_rejected_requests_total {rejected}")),
        "{rejected} rejected:\n{metrics}"
    );
    assert!(
        metrics.contains("capstan_queue_depth{queue=\"fast\"} 0"),
        "{metrics}"
    );
}

/// Counts a burst's answers (each checked by `check`) and its refusals (503 with
/// Retry-After); any other status fails the test.
fn answered_or_refused(srv: &Server, results: &[Resp], check: impl Fn(&Value)) -> (usize, usize) {
    let (mut answered, mut refused) = (0, 0);
    for r in results {
        match r.status {
            200 => {
                check(&r.json());
                answered += 1;
            }
            503 => {
                assert!(r.header("retry-after").is_some());
                refused += 1;
            }
            other => panic!("unexpected {other}: {}\n{}", r.text(), srv.log_text()),
        }
    }
    (answered, refused)
}

/// A burst of generative questions against SmolLM2 with room for 2 requests in flight and a
/// queue of 8: every request gets exactly one answer (200) or a 503 with Retry-After, none is
/// lost, the scheduler never runs more sequences than were let in, and its metrics account for
/// each. (Waiting for KV budget is tested deterministically on the scheduler itself, in
/// engine/tests/scheduler.rs.)
#[test]
fn a_generative_burst_is_batched_queued_or_refused_and_never_lost() {
    let f = fixture();
    let model = smollm2();
    let srv = Server::start(
        &f.index,
        &[
            "--llama-model",
            s(&model),
            "--max-generations",
            "2",
            "--max-new-tokens",
            "4",
            // Queued generations wait as long as they need here (the deadline has its own test).
            "--queue-timeout",
            "600",
        ],
    );
    let qs = questions(&f.data);
    let n = 14;
    let requests = (0..n)
        .map(|i| {
            let question = &qs[i % qs.len()];
            (
                "/v1/qa",
                json!({"question": question, "k": 1, "reader": "llama", "answer": "free"}),
            )
        })
        .collect();
    let results: Vec<Resp> = burst(srv.port, requests)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let (ok, refused) = answered_or_refused(&srv, &results, |a| {
        assert_eq!(a["reader"], "llama", "{a}");
        assert!(a["usage"]["generated_tokens"].as_u64().unwrap() >= 1, "{a}");
    });
    eprintln!("generative burst: {ok} answered, {refused} refused");
    // Up to 2 in flight + 8 queued (4 x --max-generations) are accepted (one fewer when a
    // worker has not yet taken its job when the queue fills); the rest are refused.
    assert_eq!(ok + refused, n);
    assert!((8..=10).contains(&ok), "{ok} answered");
    assert!(refused >= 1, "nothing refused");
    let m = srv.get("/metrics").text();
    let label = "{reader=\"llama\"}";
    assert_eq!(
        metric(
            &m,
            &format!("capstan_scheduler_queue_wait_seconds_count{label}")
        ),
        ok as f64,
        "each answered request was admitted once"
    );
    assert_eq!(
        metric(&m, &format!("capstan_scheduler_running_sequences{label}")),
        0.0
    );
    assert_eq!(
        metric(&m, &format!("capstan_scheduler_kv_tokens_used{label}")),
        0.0,
        "every reservation was given back"
    );
    let steps = metric(&m, &format!("capstan_scheduler_batch_size_count{label}"));
    let within_two = metric(
        &m,
        "capstan_scheduler_batch_size_bucket{reader=\"llama\",le=\"2\"}",
    );
    assert_eq!(
        within_two, steps,
        "a step ran more sequences than were let in"
    );
    assert!(
        metric(
            &m,
            &format!("capstan_scheduler_time_to_first_token_seconds_count{label}")
        ) >= ok as f64
    );

    // Span answers (the default) are scored by the model through the same scheduler: a burst
    // of them is admitted, queued or refused by the same rule, and none is lost.
    let requests = (0..n)
        .map(|i| {
            let question = &qs[i % qs.len()];
            (
                "/v1/qa",
                json!({"question": question, "k": 1, "reader": "llama"}),
            )
        })
        .collect();
    let results: Vec<Resp> = burst(srv.port, requests)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let (spans, refused) = answered_or_refused(&srv, &results, |a| {
        assert_eq!(a["kind"], "span", "{a}");
        assert!(a["usage"]["decoder_tokens"].as_u64().unwrap() >= 1, "{a}");
    });
    eprintln!("span burst: {spans} answered, {refused} refused");
    assert_eq!(spans + refused, n);
    assert!((8..=10).contains(&spans), "{spans} answered");
    let m = srv.get("/metrics").text();
    assert_eq!(
        metric(
            &m,
            &format!("capstan_scheduler_queue_wait_seconds_count{label}")
        ),
        (ok + spans) as f64,
        "each answered span request was admitted once by the scheduler"
    );
    assert_eq!(
        metric(&m, &format!("capstan_scheduler_kv_tokens_used{label}")),
        0.0,
        "every scoring reservation was given back"
    );
}

#[test]
fn sigterm_finishes_the_request_in_flight_then_exits_0() {
    let f = fixture();
    let mut srv = Server::start(&f.index, &[]);
    let question = questions(&f.data)[0].clone();
    let body = json!({"question": question, "k": 5}).to_string();
    let (first, second) = body.as_bytes().split_at(body.len() / 2);

    // A request in flight: the head and half the body are sent.
    let mut stream = connect(srv.port).unwrap();
    let head = format!(
        "POST /v1/qa HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(first).unwrap();
    stream.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let status = std::process::Command::new("kill")
        .args(["-TERM", &srv.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // The listener closes (new connections are refused) ...
    let deadline = Instant::now() + Duration::from_secs(20);
    while try_request(srv.port, "GET", "/health", &[], None).is_ok() {
        assert!(
            Instant::now() < deadline,
            "still accepting new requests after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // ... but the process waits for the request in flight.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        srv.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );

    stream.write_all(second).unwrap();
    let r = read_response(&mut stream).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.json()["answer"].as_str().unwrap().is_empty());
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "the connection closes after the last answer"
    );

    let exit = srv
        .wait_exit(Duration::from_secs(30))
        .expect("the server exits after SIGTERM");
    assert!(exit.success(), "exit status {exit:?}\n{}", srv.log_text());
    assert!(
        srv.log_text().contains("capstan: stopped"),
        "{}",
        srv.log_text()
    );
}

#[test]
fn sigterm_gives_up_on_a_stalled_request_after_the_grace_period() {
    let f = fixture();
    let mut srv = Server::start_with_env(&f.index, &[], &[("CAPSTAN_SHUTDOWN_GRACE", "1")]);
    // A client that sends half its request and then nothing.
    let mut stream = connect(srv.port).unwrap();
    stream
        .write_all(b"POST /v1/qa HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"question\":")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &srv.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = srv
        .wait_exit(Duration::from_secs(20))
        .expect("the server exits although a request never finished");
    assert!(exit.success(), "exit status {exit:?}\n{}", srv.log_text());
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "it gave the request its grace period"
    );
    assert!(
        srv.log_text().contains("still in flight"),
        "{}",
        srv.log_text()
    );
}

#[test]
fn slow_and_silent_clients_are_cut_off_by_the_timeouts() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--header-timeout", "2", "--body-timeout", "2"]);
    let limit = Duration::from_secs(10);
    // A body announced as 100 bytes of which one arrives: 408 in the API's error
    // shape, then the connection closes.
    let mut half_body = connect(srv.port).unwrap();
    half_body
        .write_all(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    // Half a request head, and a connection that never sends a byte.
    let mut half_head = connect(srv.port).unwrap();
    half_head
        .write_all(b"POST /v1/search HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut silent = connect(srv.port).unwrap();
    // Many idle connections at once are all closed as well.
    let mut idle: Vec<TcpStream> = (0..50).map(|_| connect(srv.port).unwrap()).collect();

    let (bytes, closed) = read_until_closed(&mut half_body, limit);
    let closed = closed.expect("a half-sent body keeps its connection open");
    let resp = parse_response(&bytes).unwrap();
    assert_eq!(resp.status, 408, "{}", resp.text());
    assert_eq!(
        resp.json()["error"]["type"],
        "request_timeout",
        "{}",
        resp.text()
    );
    assert!(closed < Duration::from_secs(6), "closed after {closed:?}");
    for (what, stream) in [("half a head", &mut half_head), ("silent", &mut silent)] {
        let (_, closed) = read_until_closed(stream, limit);
        let closed = closed.unwrap_or_else(|| panic!("{what}: still open after {limit:?}"));
        assert!(
            closed < Duration::from_secs(6),
            "{what}: closed after {closed:?}"
        );
    }
    let start = Instant::now();
    for stream in &mut idle {
        let left = limit
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(10));
        assert!(
            read_until_closed(stream, left).1.is_some(),
            "an idle connection is still open after {:?}",
            start.elapsed()
        );
    }
    // A keep-alive connection is answered, then closed once idle.
    let mut kept = connect(srv.port).unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (bytes, closed) = read_until_closed(&mut kept, limit);
    assert_eq!(parse_response(&bytes).unwrap().status, 200);
    let closed = closed.expect("an idle keep-alive connection stays open");
    assert!(closed >= Duration::from_secs(1), "closed after {closed:?}");
    // The server serves on.
    assert_eq!(srv.get("/health").status, 200);
}

#[test]
fn work_queued_past_its_deadline_is_answered_503_without_running() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--workers", "1", "--queue-timeout", "0.2"]);
    let text = questions(&f.data).join(" ");
    // One embedding worker: each of these takes far longer than the deadline, so
    // the ones queued behind the first wait past it.
    let requests = (0..4)
        .map(|i| {
            (
                "/v1/embeddings",
                json!({"input": vec![format!("{i} {text}"); 64]}),
            )
        })
        .collect();
    let done = burst(srv.port, requests);
    let statuses: Vec<u16> = done.iter().map(|(_, r)| r.status).collect();
    assert!(statuses.contains(&200), "{statuses:?}");
    let expired: Vec<&Resp> = done
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.status == 503)
        .collect();
    assert!(!expired.is_empty(), "none expired: {statuses:?}");
    for r in expired {
        assert!(r.header("retry-after").is_some());
        assert!(r.text().contains("past its deadline"), "{}", r.text());
    }
}
