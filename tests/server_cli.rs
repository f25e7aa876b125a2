//! End-to-end: `capstan serve` over a small generated index: a catalogue of bad requests
//! (each a 4xx with a JSON error, never a 5xx, and the server keeps serving), every route's
//! good path, odd but valid questions, and documents cited by page. What the server refuses
//! at start and its API key: `server_access.rs`.

mod common;
mod http;

use base64::Engine as _;
use common::{capstan, documents, encoder_dir, ok, questions, s};
use http::*;
use serde_json::{json, Value};

#[test]
fn pdf_passages_are_cited_by_page_over_http() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = tmp.path().join("docs");
    let index = tmp.path().join("index");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(
        documents().join("pdf/neatoguide.pdf"),
        folder.join("neatoguide.pdf"),
    )
    .unwrap();
    ok(&[
        "index",
        s(&folder),
        "--out",
        s(&index),
        "--encoder",
        s(&encoder_dir()),
        "-q",
    ]);
    let srv = Server::start(&index, &[]);
    let question = "What is the default number of iterations in neato?";
    let search = srv
        .post("/v1/search", &json!({"query": question, "k": 3}))
        .ok_json();
    for hit in search["hits"].as_array().unwrap() {
        assert_eq!(hit["doc_id"], "neatoguide.pdf");
        let (a, b) = (
            hit["page_start"].as_u64().unwrap(),
            hit["page_end"].as_u64().unwrap(),
        );
        assert!((1..=b).contains(&a) && b <= 11, "{hit}");
    }
    let qa = srv.post("/v1/qa", &json!({"question": question})).ok_json();
    assert!(qa["passages"][0]["page_start"].is_u64(), "{qa}");
    let chat = srv
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": question}]}),
        )
        .ok_json();
    let sources = chat["sources"].as_array().unwrap();
    assert!(!sources.is_empty(), "{chat}");
    for source in sources {
        assert_eq!(source["doc_id"], "neatoguide.pdf");
        assert!(
            source["page_start"].is_u64() && source["page_end"].is_u64(),
            "{source}"
        );
        assert!(chat["citations"]
            .as_array()
            .unwrap()
            .contains(&source["passage_id"]));
    }
}

#[test]
fn bad_requests_get_4xx_json_errors_and_the_server_keeps_serving() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--max-body-bytes", "16384", "--workers", "2"]);
    let question = questions(&f.data)[0].clone();
    let huge = "why ".repeat(600); // 2400 characters, over the 2000 limit, under the body limit
    let too_big = format!("{{\"question\":\"{}\"}}", "x".repeat(20_000));

    let post = |p: &str, b: &str| srv.post_raw(p, b.as_bytes());
    let cases: Vec<(&str, Resp, Option<u16>)> = vec![
        ("qa: malformed JSON", post("/v1/qa", "{\"question\": "), Some(400)),
        ("qa: not JSON at all", post("/v1/qa", "question=why"), Some(400)),
        ("qa: empty body", post("/v1/qa", ""), Some(400)),
        ("qa: JSON array", post("/v1/qa", "[1,2]"), Some(400)),
        ("qa: invalid UTF-8", srv.post_raw("/v1/qa", b"{\"question\":\"\xff\xfe\"}"), Some(400)),
        ("qa: question is a number", post("/v1/qa", r#"{"question": 5}"#), Some(400)),
        ("qa: question is null", post("/v1/qa", r#"{"question": null}"#), Some(400)),
        ("qa: k is a string", post("/v1/qa", r#"{"question": "why", "k": "ten"}"#), Some(400)),
        ("qa: k is negative", post("/v1/qa", r#"{"question": "why", "k": -1}"#), Some(400)),
        ("qa: k is a float", post("/v1/qa", r#"{"question": "why", "k": 2.5}"#), Some(400)),
        ("qa: k overflows", post("/v1/qa", r#"{"question": "why", "k": 1e30}"#), Some(400)),
        ("qa: stream is a string", post("/v1/qa", r#"{"question": "why", "stream": "yes"}"#), Some(400)),
        ("qa: missing question", post("/v1/qa", "{}"), Some(400)),
        ("qa: empty question", post("/v1/qa", r#"{"question": ""}"#), Some(400)),
        ("qa: blank question", post("/v1/qa", r#"{"question": " \n\t "}"#), Some(400)),
        ("qa: huge question", srv.post("/v1/qa", &json!({ "question": huge })), Some(400)),
        ("qa: k = 0", srv.post("/v1/qa", &json!({"question": question, "k": 0})), Some(400)),
        ("qa: k = 10^9", srv.post("/v1/qa", &json!({"question": question, "k": 1_000_000_000u64})), Some(400)),
        ("qa: unknown mode", srv.post("/v1/qa", &json!({"question": question, "mode": "psychic"})), Some(400)),
        ("qa: unknown reader", srv.post("/v1/qa", &json!({"question": question, "reader": "gpt"})), Some(400)),
        ("qa: reader not loaded", srv.post("/v1/qa", &json!({"question": question, "reader": "llama"})), Some(400)),
        ("qa: unknown field", srv.post("/v1/qa", &json!({"question": question, "colour": "blue"})), Some(400)),
        ("qa: max_tokens = 0", srv.post("/v1/qa", &json!({"question": question, "max_tokens": 0})), Some(400)),
        ("qa: temperature = 9", srv.post("/v1/qa", &json!({"question": question, "temperature": 9})), Some(400)),
        ("qa: top_p = 0", srv.post("/v1/qa", &json!({"question": question, "top_p": 0})), Some(400)),
        ("qa: top_k = 0", srv.post("/v1/qa", &json!({"question": question, "top_k": 0})), Some(400)),
        ("qa: oversized body", post("/v1/qa", &too_big), Some(413)),
        (
            "qa: oversized chunked body",
            chunked_post(srv.port, "/v1/qa", too_big.as_bytes()),
            Some(413),
        ),
        ("search: missing query", srv.post("/v1/search", &json!({"k": 3})), Some(400)),
        ("search: empty query", srv.post("/v1/search", &json!({"query": ""})), Some(400)),
        ("search: k = 0", srv.post("/v1/search", &json!({"query": question, "k": 0})), Some(400)),
        ("search: k = 10^9", srv.post("/v1/search", &json!({"query": question, "k": 1_000_000_000u64})), Some(400)),
        ("search: unknown field", srv.post("/v1/search", &json!({"query": question, "top": 3})), Some(400)),
        (
            "search: bad fusion",
            srv.post("/v1/search", &json!({"query": question, "mode": "hybrid", "fusion": {"method": "magic"}})),
            Some(400),
        ),
        (
            "search: fusion weight out of range",
            srv.post(
                "/v1/search",
                &json!({"query": question, "mode": "hybrid", "fusion": {"method": "weighted", "bm25_weight": 7.0}}),
            ),
            Some(400),
        ),
        (
            "search: negative rrf k",
            srv.post(
                "/v1/search",
                &json!({"query": question, "mode": "hybrid", "fusion": {"method": "rrf", "k": -1.0}}),
            ),
            Some(400),
        ),
        ("embeddings: missing input", srv.post("/v1/embeddings", &json!({})), Some(400)),
        ("embeddings: input is a number", srv.post("/v1/embeddings", &json!({"input": 5})), Some(400)),
        ("embeddings: token arrays", srv.post("/v1/embeddings", &json!({"input": [[1, 2, 3]]})), Some(400)),
        ("embeddings: empty list", srv.post("/v1/embeddings", &json!({"input": []})), Some(400)),
        ("embeddings: empty string", srv.post("/v1/embeddings", &json!({"input": ""})), Some(400)),
        (
            "embeddings: bad encoding_format",
            srv.post("/v1/embeddings", &json!({"input": "hello", "encoding_format": "int8"})),
            Some(400),
        ),
        (
            "embeddings: unknown model",
            srv.post("/v1/embeddings", &json!({"input": "hello", "model": "text-embedding-3-large"})),
            Some(404),
        ),
        (
            "embeddings: wrong dimensions",
            srv.post("/v1/embeddings", &json!({"input": "hello", "dimensions": 1536})),
            Some(400),
        ),
        ("chat: missing messages", srv.post("/v1/chat/completions", &json!({"model": "capstan"})), Some(400)),
        ("chat: empty messages", srv.post("/v1/chat/completions", &json!({"messages": []})), Some(400)),
        ("chat: messages not a list", srv.post("/v1/chat/completions", &json!({"messages": "hi"})), Some(400)),
        (
            "chat: no user message",
            srv.post("/v1/chat/completions", &json!({"messages": [{"role": "system", "content": "be brief"}]})),
            Some(400),
        ),
        (
            "chat: empty user message",
            srv.post("/v1/chat/completions", &json!({"messages": [{"role": "user", "content": ""}]})),
            Some(400),
        ),
        (
            "chat: unknown model",
            srv.post(
                "/v1/chat/completions",
                &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}),
            ),
            Some(404),
        ),
        (
            "chat: model not loaded",
            srv.post(
                "/v1/chat/completions",
                &json!({"model": "capstan-llama", "messages": [{"role": "user", "content": question}]}),
            ),
            Some(404),
        ),
        (
            "chat: n = 2",
            srv.post("/v1/chat/completions", &json!({"n": 2, "messages": [{"role": "user", "content": question}]})),
            Some(400),
        ),
        (
            "chat: temperature = -1",
            srv.post(
                "/v1/chat/completions",
                &json!({"temperature": -1, "messages": [{"role": "user", "content": question}]}),
            ),
            Some(400),
        ),
        (
            "chat: streamed, unknown model",
            srv.post(
                "/v1/chat/completions",
                &json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": question}]}),
            ),
            Some(404),
        ),
        (
            "chat: unknown role after the last user turn",
            srv.post(
                "/v1/chat/completions",
                &json!({"messages": [{"role": "user", "content": question}, {"role": "robot", "content": "x"}]}),
            ),
            Some(400),
        ),
        ("chat: JSON array", post("/v1/chat/completions", "[]"), Some(400)),
        ("unknown route", srv.get("/v1/nothing-here"), Some(404)),
        ("unknown route, POST", srv.post("/v2/qa", &json!({"question": question})), Some(404)),
        ("wrong method: GET /v1/qa", srv.get("/v1/qa"), Some(405)),
        ("wrong method: DELETE /v1/search", srv.call("DELETE", "/v1/search", &[], None), Some(405)),
        ("wrong method: POST /health", srv.post("/health", &json!({})), Some(405)),
        ("wrong method: PUT /v1/models", srv.call("PUT", "/v1/models", &[], Some(b"{}")), Some(405)),
    ];
    let mut failures = Vec::new();
    for (what, r, expected) in &cases {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (status, _) = assert_client_error(what, r);
            if let Some(e) = expected {
                assert_eq!(status, *e, "{what}: {}", r.text());
            }
            if status == 405 {
                assert!(
                    r.header("allow").is_some(),
                    "{what}: 405 without an Allow header"
                );
            }
        }));
        if let Err(e) = result {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(msg);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad requests were answered wrongly:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // The messages say what is wrong, and what is accepted.
    let message = |what: &str| {
        let (_, r, _) = cases.iter().find(|(w, _, _)| *w == what).unwrap();
        r.json()["error"]["message"].as_str().unwrap().to_string()
    };
    assert!(
        message("qa: JSON array").contains("must be a JSON object"),
        "{}",
        message("qa: JSON array")
    );
    let role = message("chat: unknown role after the last user turn");
    assert!(
        role.contains("turn 1")
            && role.contains("developer, tool or function")
            && role.contains("robot"),
        "{role}"
    );
    // An empty assistant turn (a tool call's) is passed over, not read as an empty answer.
    let chat = srv
        .post(
            "/v1/chat/completions",
            &json!({"messages": [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": null},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": question}]}),
        )
        .ok_json();
    assert!(
        !chat["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .is_empty(),
        "{chat}"
    );

    // The server still serves, and counted what it refused.
    let answer = srv.post("/v1/qa", &json!({"question": question})).ok_json();
    assert!(!answer["answer"].as_str().unwrap().is_empty());
    let metrics = srv.get("/metrics").text();
    assert!(
        metrics.contains(r#"capstan_http_requests_total{route="/v1/qa",status="400"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"capstan_http_requests_total{route="/v1/qa",status="413"}"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"status="5"#),
        "a 5xx was counted:\n{metrics}"
    );
}

#[test]
fn odd_but_valid_questions_are_answered() {
    let f = fixture();
    let srv = Server::start(&f.index, &[]);
    // Query-syntax characters, non-ASCII, emoji, one long word, one character:
    // all legitimate questions; none may fail the server.
    let long_word = "a".repeat(1999);
    let odd = [
        "AND OR NOT (",
        "title:\"unclosed",
        "*",
        "+-&&||!(){}[]^\"~*?:\\/",
        "Wer gründete die Stadt? 誰が町を作った？",
        "🦀🦀🦀 where is the crab?",
        long_word.as_str(),
        "?",
        "null\u{0}byte",
    ];
    for q in odd {
        for mode in ["bm25", "dense", "hybrid"] {
            let r = srv.post("/v1/qa", &json!({"question": q, "mode": mode, "k": 5}));
            assert_eq!(r.status, 200, "qa {mode} {q:?}: {}", r.text());
            let a = r.json();
            if let Some(h) = a["highlight"].as_object() {
                let p = a["passages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|p| p["passage_id"] == h["passage_id"])
                    .expect("the highlighted passage is among the passages");
                let chars: Vec<char> = p["text"].as_str().unwrap().chars().collect();
                let (start, end) = (
                    h["start"].as_u64().unwrap() as usize,
                    h["end"].as_u64().unwrap() as usize,
                );
                let marked: String = chars[start..end].iter().collect();
                let answer = a["answer"].as_str().unwrap();
                if a["kind"] == "span" {
                    // A span answer stands at its span's offsets, inside its highlighted sentence.
                    let span = &a["spans"][0];
                    assert_eq!(span["passage_id"], h["passage_id"], "{a}");
                    let (s0, s1) = (
                        span["start"].as_u64().unwrap() as usize,
                        span["end"].as_u64().unwrap() as usize,
                    );
                    let spanned: String = if span["in_title"] == json!(true) {
                        p["title"]
                            .as_str()
                            .unwrap()
                            .chars()
                            .skip(s0)
                            .take(s1 - s0)
                            .collect()
                    } else {
                        assert!(start <= s0 && s1 <= end, "span outside its sentence: {a}");
                        chars[s0..s1].iter().collect()
                    };
                    assert_eq!(spanned, answer, "span offsets are the answer's");
                } else {
                    assert_eq!(marked, answer, "highlight offsets are the answer's");
                }
            }
            let r = srv.post("/v1/search", &json!({"query": q, "mode": mode, "k": 3}));
            assert_eq!(r.status, 200, "search {mode} {q:?}: {}", r.text());
        }
    }
}

#[test]
fn every_route_answers() {
    let f = fixture();
    let srv = Server::start(&f.index, &[]);
    let qs = questions(&f.data);
    let question = &qs[0];

    // /health
    let health = srv.get("/health").ok_json();
    assert_eq!(health["status"], "ok");
    assert!(
        health["index"]["passages"].as_u64().unwrap() >= 40,
        "{health}"
    );
    assert_eq!(health["readers"], json!(["extractive"]));
    // /health is public: it names the encoder, never a path.
    assert_eq!(health["index"]["encoder"], "all-MiniLM-L6-v2", "{health}");
    assert!(
        !health.to_string().contains('/'),
        "a path in /health: {health}"
    );

    // /v1/qa, JSON
    let a = srv
        .post("/v1/qa", &json!({"question": question, "k": 5}))
        .ok_json();
    let answer = a["answer"].as_str().unwrap().to_string();
    assert!(!answer.is_empty(), "{a}");
    let passages = a["passages"].as_array().unwrap();
    assert!(!passages.is_empty() && passages.len() <= 5, "{a}");
    let cited = a["citations"].as_array().unwrap();
    assert_eq!(cited.len(), 1, "{a}");
    let cited_passage = passages
        .iter()
        .find(|p| p["passage_id"] == cited[0])
        .expect("cited passage returned");
    assert!(
        cited_passage["text"].as_str().unwrap().contains(&answer)
            || cited_passage["title"].as_str().unwrap().contains(&answer),
        "the answer is a span of its passage: {a}"
    );
    assert_eq!(a["highlight"]["passage_id"], cited[0]);
    assert_eq!(a["reader"], "extractive");
    for t in ["retrieve_ms", "assemble_ms", "read_ms", "total_ms"] {
        assert!(a["timings"][t].as_f64().unwrap() >= 0.0, "{t}: {a}");
    }
    assert!(a["usage"].is_object());
    for mode in ["bm25", "dense", "hybrid"] {
        let m = srv
            .post(
                "/v1/qa",
                &json!({"question": question, "mode": mode, "k": 3}),
            )
            .ok_json();
        assert!(!m["answer"].as_str().unwrap().is_empty(), "{mode}: {m}");
    }

    // /v1/qa, streamed: token events, then one answer event equal to the JSON answer.
    let r = srv.post(
        "/v1/qa",
        &json!({"question": question, "k": 5, "stream": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.events();
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert!(
        names.len() >= 2 && names[..names.len() - 1].iter().all(|e| *e == "token"),
        "{names:?}"
    );
    assert_eq!(*names.last().unwrap(), "answer", "{names:?}");
    let streamed: String = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(streamed, answer);
    assert_eq!(last["answer"].as_str().unwrap(), answer);
    assert_eq!(last["citations"], a["citations"]);

    // /v1/search
    let hits = srv
        .post("/v1/search", &json!({"query": question, "k": 4}))
        .ok_json();
    let list = hits["hits"].as_array().unwrap();
    assert!(!list.is_empty() && list.len() <= 4, "{hits}");
    for field in ["passage_id", "doc_id", "title", "text", "score"] {
        assert!(!list[0][field].is_null(), "hit lacks {field}: {hits}");
    }
    let weighted = srv
        .post(
            "/v1/search",
            &json!({"query": question, "mode": "hybrid", "fusion": {"method": "weighted", "bm25_weight": 0.3}}),
        )
        .ok_json();
    assert!(!weighted["hits"].as_array().unwrap().is_empty());

    // /v1/embeddings: float and base64 give the same vectors.
    let input = json!(["the harbour town", question]);
    let fl = srv
        .post("/v1/embeddings", &json!({"input": input}))
        .ok_json();
    let b64 = srv
        .post(
            "/v1/embeddings",
            &json!({"input": input, "encoding_format": "base64"}),
        )
        .ok_json();
    assert_eq!(fl["object"], "list");
    assert_eq!(fl["data"].as_array().unwrap().len(), 2);
    for i in 0..2 {
        assert_eq!(fl["data"][i]["index"], i);
        assert_eq!(fl["data"][i]["object"], "embedding");
        let floats: Vec<f32> = fl["data"][i]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(floats.len(), 384);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64["data"][i]["embedding"].as_str().unwrap())
            .unwrap();
        let decoded: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(decoded, floats, "input {i}: base64 and float differ");
        let norm: f32 = floats.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "normalised: {norm}");
    }
    assert!(fl["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let model = fl["model"].as_str().unwrap().to_string();
    let one = srv
        .post(
            "/v1/embeddings",
            &json!({"input": "the harbour town", "model": model}),
        )
        .ok_json();
    assert_eq!(
        one["data"][0]["embedding"], fl["data"][0]["embedding"],
        "one string = first of the list"
    );

    // /v1/chat/completions
    let chat = srv
        .post(
            "/v1/chat/completions",
            &json!({"model": "capstan", "messages": [
                {"role": "system", "content": "Answer from the index."},
                {"role": "user", "content": question}]}),
        )
        .ok_json();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["choices"][0]["message"]["role"], "assistant");
    // Chat answers in free text: from the extractive reader, its best sentence.
    let sentence = srv
        .post(
            "/v1/qa",
            &json!({"question": question, "k": 5, "answer": "sentence"}),
        )
        .ok_json();
    assert_eq!(sentence["kind"], "sentence", "{sentence}");
    assert_eq!(
        chat["choices"][0]["message"]["content"], sentence["answer"],
        "{chat}"
    );
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    assert!(chat["usage"]["total_tokens"].is_u64());
    let parts = srv
        .post(
            "/v1/chat/completions",
            &json!({"model": "capstan-extractive", "messages": [
                {"role": "user", "content": [{"type": "text", "text": question}]}]}),
        )
        .ok_json();
    assert_eq!(
        parts["choices"][0]["message"]["content"],
        sentence["answer"]
    );

    // Streamed chat: role chunk, content chunks, a finish chunk, then [DONE].
    let r = srv.post(
        "/v1/chat/completions",
        &json!({"model": "capstan", "stream": true, "messages": [{"role": "user", "content": question}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().unwrap().1, "[DONE]", "{events:?}");
    assert!(
        r.text().trim_end().ends_with("data: [DONE]"),
        "{}",
        r.text()
    );
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(name, d)| {
            assert_eq!(name, "message", "OpenAI streams have no event names");
            serde_json::from_str(d).unwrap()
        })
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert!(
        chunks.iter().all(|c| c["id"] == chunks[0]["id"]),
        "one id per stream"
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, sentence["answer"].as_str().unwrap());
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    // /v1/models
    let models = srv.get("/v1/models").ok_json();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"capstan-extractive") && ids.contains(&model.as_str()),
        "{ids:?}"
    );
    let one = srv.get("/v1/models/capstan-extractive").ok_json();
    assert_eq!(one["id"], "capstan-extractive");
    assert_eq!(one["object"], "model");
    let (status, kind) = assert_client_error("unknown model", &srv.get("/v1/models/gpt-4o"));
    assert_eq!((status, kind.as_str()), (404, "model_not_found"));

    // / (the web page)
    let page = srv.get("/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(page.text().contains("<form id=\"ask\""));

    // /openapi.json parses and lists every path the server routes.
    let spec = srv.get("/openapi.json").ok_json();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    assert!(
        spec.get("security").is_none(),
        "no key configured, none documented"
    );
    assert_eq!(
        spec["paths"]["/v1/qa"]["post"]["requestBody"]["content"]["application/json"]["schema"]
            ["properties"]["k"]["anyOf"][0]["maximum"],
        100
    );
    let paths = spec["paths"].as_object().unwrap();
    let routes = [
        ("/", "get"),
        ("/health", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
        ("/v1/qa", "post"),
        ("/v1/search", "post"),
        ("/v1/embeddings", "post"),
        ("/v1/chat/completions", "post"),
    ];
    for (path, method) in routes {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "openapi.json lacks {method} {path}"
        );
    }
    assert_eq!(
        paths.len(),
        routes.len(),
        "openapi.json lists a path the server lacks: {:?}",
        paths.keys()
    );

    // /metrics counts every route it served.
    let metrics = srv.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    let text = metrics.text();
    for (path, _) in routes.iter().filter(|(p, _)| *p != "/metrics") {
        assert!(
            text.contains(&format!(
                "capstan_http_requests_total{{route=\"{path}\",status=\"200\"}}"
            )),
            "no counter for {path}:\n{text}"
        );
    }
    for needle in [
        "capstan_http_request_duration_seconds_bucket{route=\"/v1/qa\",le=\"+Inf\"}",
        "capstan_stage_duration_seconds_count{stage=\"retrieve\"}",
        "capstan_queue_depth{queue=\"fast\"}",
        "capstan_rejected_requests_total 0",
    ] {
        assert!(text.contains(needle), "no {needle}:\n{text}");
    }
}

#[test]
fn the_cli_reads_an_index_a_server_holds_open() {
    let f = fixture();
    let srv = Server::start(&f.index, &[]);
    // The server's own copy of the index: its passage store is locked by the server.
    let index = srv._logdir.path().join("index");
    let question = &questions(&f.data)[0];
    let out = capstan()
        .args([
            "search",
            s(&index),
            question,
            "--mode",
            "hybrid",
            "-k",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "search beside a server failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    let http = srv
        .post(
            "/v1/search",
            &json!({"query": question, "mode": "hybrid", "k": 3}),
        )
        .ok_json();
    let ids = |hits: &Value| -> Vec<String> {
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| h["passage_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&cli), ids(&http["hits"]), "same index, same hits");
    // The server keeps serving.
    assert_eq!(srv.get("/health").status, 200);
}
