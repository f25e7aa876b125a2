//! End-to-end: what `capstan serve` answers with the SmolLM2 reader: span answers that stand
//! in their cited passages (alone, concurrent and streamed), follow-up questions, and chat's
//! OpenAI options (length, stop, seed, penalties, logit bias, log-probabilities).

mod common;
mod http;

use common::{ok, questions, s, smollm2};
use http::*;
use serde_json::{json, Value};

#[test]
fn span_answers_stand_in_their_cited_passages_alone_concurrent_and_streamed() {
    let f = fixture();
    let srv = Server::start(
        &f.index,
        &["--llama-model", s(&smollm2()), "--max-new-tokens", "16"],
    );
    let qs = questions(&f.data);
    let body = |q: &str| json!({"question": q, "k": 3, "reader": "llama", "answer": "span"});
    // Alone, one after the other.
    let alone: Vec<String> = qs
        .iter()
        .map(|q| check_span_answer(&srv.post("/v1/qa", &body(q)).ok_json()))
        .collect();
    assert!(
        alone.iter().filter(|a| !a.is_empty()).count() >= qs.len() - 1,
        "{alone:?}"
    );
    // All at once: batched by the scheduler, the same greedy answers.
    let together = burst(srv.port, qs.iter().map(|q| ("/v1/qa", body(q))).collect());
    for ((_, r), want) in together.iter().zip(&alone) {
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(&check_span_answer(&r.json()), want);
    }
    // Streamed: the final answer event is the same answer.
    let mut streamed = body(&qs[0]);
    streamed["stream"] = json!(true);
    let r = srv.post("/v1/qa", &streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let (name, data) = events.last().unwrap();
    assert_eq!(name, "answer", "{events:?}");
    assert_eq!(
        check_span_answer(&serde_json::from_str(data).unwrap()),
        alone[0]
    );
    // Free answers are one line, with their finish reason.
    let mut free = body(&qs[0]);
    free["answer"] = json!("free");
    let a = srv.post("/v1/qa", &free).ok_json();
    assert_eq!(a["kind"], "free", "{a}");
    assert!(!a["answer"].as_str().unwrap().contains('\n'), "{a}");
    assert!(["stop", "length"].contains(&a["finish_reason"].as_str().unwrap()));
    // Nothing retrieved (a filter no passage matches): no answer, and the model is not run.
    let none = srv
        .post(
            "/v1/qa",
            &json!({"question": qs[0], "reader": "llama", "answer": "span",
                    "filter": {"no-such-field": "x"}}),
        )
        .ok_json();
    assert_eq!(none["no_answer"], true, "{none}");
    assert_eq!(none["answer"], "", "{none}");
    assert_eq!(none["citations"], json!([]), "{none}");
    assert_eq!(none["usage"]["decoder_tokens"], 0, "{none}");
    // Bad input: copying needs a generative reader; chat is free text.
    let bad = [
        (
            "copied by decoding with the extractive reader",
            "/v1/qa",
            json!({"question": qs[0], "reader": "extractive", "answer": "copy"}),
        ),
        (
            "unknown answer mode",
            "/v1/qa",
            json!({"question": qs[0], "reader": "llama", "answer": "poem"}),
        ),
        (
            "span in chat",
            "/v1/chat/completions",
            json!({"model": "capstan-llama", "answer": "span",
                   "messages": [{"role": "user", "content": qs[0]}]}),
        ),
    ];
    for (what, path, b) in bad {
        let (status, message) = assert_client_error(what, &srv.post(path, &b));
        assert_eq!(status, 400, "{what}: {message}");
    }
}

#[test]
fn a_follow_up_retrieves_whom_the_conversation_is_about() {
    let f = fixture();
    let (question, doc, title) = question_naming_its_document(&f.data);
    let follow_up = question.replace(&title, "this one");
    let srv = Server::start(&f.index, &[]);
    let first = format!("Tell me about {title}.");
    // /v1/qa with its history.
    let qa = srv
        .post(
            "/v1/qa",
            &json!({"question": follow_up, "k": 3, "history": [
                {"role": "user", "content": first},
                {"role": "assistant", "content": "Here is what the encyclopedia says."}]}),
        )
        .ok_json();
    assert_eq!(qa["passages"][0]["doc_id"], doc.as_str(), "{qa}");
    // The chat endpoint reads the whole conversation, and says why it stopped.
    let chat = srv
        .post(
            "/v1/chat/completions",
            &json!({"messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": first},
                {"role": "assistant", "content": "Here is what the encyclopedia says."},
                {"role": "user", "content": follow_up}]}),
        )
        .ok_json();
    assert_eq!(chat["sources"][0]["doc_id"], doc.as_str(), "{chat}");
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    // Bad turns are named.
    let bad = srv.post(
        "/v1/qa",
        &json!({"question": follow_up, "history": [{"role": "robot", "content": "x"}]}),
    );
    assert_eq!(assert_client_error("bad role", &bad).0, 400);
    let message = bad.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("turn 0") && message.contains("robot"),
        "{message}"
    );
    let bad = srv.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": first}], "stop": ["a", "b", "c", "d", "e"]}),
    );
    assert_eq!(assert_client_error("five stops", &bad).0, 400);
}

#[test]
fn a_follow_up_is_rewritten_by_the_llama_model_when_asked() {
    let f = fixture();
    let (question, _, title) = question_naming_its_document(&f.data);
    let follow_up = question.replace(&title, "this one");
    let srv = Server::start(&f.index, &["--llama-model", s(&smollm2())]);
    let ask = |rewrite: &str| {
        srv.post(
            "/v1/qa",
            &json!({"question": follow_up, "k": 3, "reader": "extractive", "rewrite": rewrite,
                "history": [{"role": "user", "content": format!("Tell me about {title}.")}]}),
        )
        .ok_json()
    };
    // By rules: "this one" replaced by the name, no model tokens spent.
    let rules = ask("rules");
    let by_rules = rules["retrieval_question"].as_str().unwrap();
    assert!(!by_rules.contains("this one"), "{rules}");
    assert!(rules["usage"].get("rewrite_tokens").is_none(), "{rules}");
    // By the model: it generated, and retrieval read a question (its own, or the rules'
    // where its reply was not one).
    let model = ask("model");
    assert!(
        model["usage"]["rewrite_tokens"].as_u64().unwrap() > 0,
        "{model}"
    );
    let rewritten = model["retrieval_question"].as_str().unwrap();
    assert!(rewritten.ends_with('?'), "{model}");
    let bad = srv.post(
        "/v1/qa",
        &json!({"question": follow_up, "rewrite": "magic"}),
    );
    assert_client_error("unknown rewrite", &bad);
}

#[test]
fn chat_says_length_when_max_tokens_cut_the_answer_and_honours_stop_and_seed() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--llama-model", s(&smollm2())]);
    let question = questions(&f.data)[0].clone();
    let chat = |extra: Value| {
        let mut body = json!({"model": "capstan-llama",
            "messages": [{"role": "user", "content": question}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        srv.post("/v1/chat/completions", &body).ok_json()
    };
    let cut = chat(json!({"max_tokens": 2}));
    assert_eq!(cut["choices"][0]["finish_reason"], "length", "{cut}");
    assert_eq!(cut["usage"]["completion_tokens"], 2, "{cut}");
    let whole = chat(json!({"max_tokens": 64}));
    assert_eq!(whole["choices"][0]["finish_reason"], "stop", "{whole}");
    let text = whole["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // A stop string inside the greedy answer ends it there.
    if let Some(word) = text.split_whitespace().nth(1) {
        let stopped = chat(json!({"max_tokens": 64, "stop": word}));
        let got = stopped["choices"][0]["message"]["content"]
            .as_str()
            .unwrap();
        assert!(
            !got.contains(word) && text.starts_with(got.trim_end()),
            "{got:?} of {text:?}"
        );
        assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    }
    // Sampling with a seed repeats itself; seeds are honoured (several seeds do not all give
    // one text) and, without one, each request draws its own seed and says which.
    let sampled = |seed: Option<u64>| {
        let mut body = json!({"max_tokens": 24, "temperature": 1.0});
        if let Some(seed) = seed {
            body["seed"] = json!(seed);
        }
        let r = chat(body);
        (
            r["choices"][0]["message"]["content"].clone(),
            r["seed"].clone(),
        )
    };
    assert_eq!(sampled(Some(7)), sampled(Some(7)));
    assert_eq!(sampled(Some(7)).1, json!(7));
    let texts: std::collections::HashSet<String> = (1..=4)
        .map(|seed| sampled(Some(seed)).0.to_string())
        .collect();
    assert!(texts.len() > 1, "four seeds, one text: {texts:?}");
    let (a, b) = (sampled(None), sampled(None));
    let (sa, sb) = (a.1.as_u64().unwrap(), b.1.as_u64().unwrap());
    assert_ne!(sa, sb, "unseeded requests draw fresh seeds");
    assert_eq!(
        sampled(Some(sa)).0,
        a.0,
        "the reported seed repeats the answer"
    );
    // Greedy answers report no seed.
    assert!(chat(json!({"max_tokens": 8}))["seed"].is_null());
}

/// OpenAI's sampling options are honoured or refused, never accepted and ignored: greedy
/// log-probabilities name the token drawn as the most likely; a logit bias of -100 bans the
/// answer's first token; JSON modes, tools and options the extractive reader cannot honour are
/// 400s that say why.
#[test]
fn chat_honours_logprobs_logit_bias_and_penalties_and_refuses_what_it_cannot_do() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--llama-model", s(&smollm2())]);
    let question = questions(&f.data)[0].clone();
    let body = |model: &str, extra: Value| {
        let mut body = json!({"model": model, "max_tokens": 12,
            "messages": [{"role": "user", "content": question}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let chat = |extra: Value| {
        srv.post("/v1/chat/completions", &body("capstan-llama", extra))
            .ok_json()
    };

    // Log-probabilities of a greedy answer: each token is the most likely at its place.
    let plain = chat(json!({}));
    assert!(plain["choices"][0]["logprobs"].is_null(), "{plain}");
    let with = chat(json!({"logprobs": true, "top_logprobs": 3}));
    let text = with["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(text, plain["choices"][0]["message"]["content"], "{with}");
    let tokens = with["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(
        tokens.len() as u64,
        with["usage"]["completion_tokens"].as_u64().unwrap()
            - u64::from(with["choices"][0]["finish_reason"] == "stop"),
        "one entry a generated token, the end-of-turn token left out: {with}"
    );
    let mut joined = String::new();
    for t in tokens {
        let lp = t["logprob"].as_f64().unwrap();
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{t}");
        assert!(lp <= 0.0, "{t}");
        assert_eq!(
            top[0]["token"], t["token"],
            "greedy draws the most likely: {t}"
        );
        assert!(
            (top[0]["logprob"].as_f64().unwrap() - lp).abs() < 1e-6,
            "{t}"
        );
        assert!(
            top.windows(2)
                .all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()),
            "best first: {t}"
        );
        let bytes: Vec<u8> = t["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(bytes, t["token"].as_str().unwrap().as_bytes(), "{t}");
        joined.push_str(t["token"].as_str().unwrap());
    }
    assert_eq!(joined.trim(), text.trim(), "the tokens spell the answer");
    // Streamed, they come with the last chunk.
    let streamed = body("capstan-llama", json!({"logprobs": true, "stream": true}));
    let r = srv.post("/v1/chat/completions", &streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let last: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    assert_eq!(
        last["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .len(),
        tokens.len(),
        "{last}"
    );

    // A logit bias of -100 on the answer's first token: the answer starts otherwise; +100 on
    // the runner-up: it starts with that. (OpenAI's logprobs carry no ids: the model's own
    // tokenizer gives them.)
    let first = &tokens[0];
    let runner_up = &first["top_logprobs"][1]["token"];
    let id_of = |text: &Value| -> u64 {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in.json");
        std::fs::write(&input, json!({"texts": [text]}).to_string()).unwrap();
        let out: Value = serde_json::from_str(&ok(&[
            "model",
            "tokenize",
            "--model",
            s(&smollm2()),
            "--input",
            s(&input),
        ]))
        .unwrap();
        let ids = out["ids"][0].as_array().unwrap();
        assert_eq!(ids.len(), 1, "{text} is one token: {out}");
        ids[0].as_u64().unwrap()
    };
    let first_token = |bias: Value| {
        chat(json!({"logprobs": true, "max_tokens": 1, "logit_bias": bias}))["choices"][0]
            ["logprobs"]["content"][0]["token"]
            .clone()
    };
    let (first_id, runner_up_id) = (id_of(&first["token"]), id_of(runner_up));
    assert_eq!(first_token(json!({})), first["token"]);
    assert_ne!(
        first_token(json!({ first_id.to_string(): -100 })),
        first["token"],
        "a banned token is not drawn"
    );
    assert_eq!(
        &first_token(json!({ runner_up_id.to_string(): 100 })),
        runner_up,
        "a favoured token is drawn"
    );

    // Penalties within range are taken; out of range, refused.
    chat(json!({"presence_penalty": 1.5, "frequency_penalty": 0.5}));
    let refused = [
        (
            "presence_penalty out of range",
            "capstan-llama",
            json!({"presence_penalty": 3}),
        ),
        (
            "frequency_penalty out of range",
            "capstan-llama",
            json!({"frequency_penalty": -2.5}),
        ),
        (
            "logit_bias key not a token id",
            "capstan-llama",
            json!({"logit_bias": {"hello": 5}}),
        ),
        (
            "logit_bias token past the vocabulary",
            "capstan-llama",
            json!({"logit_bias": {"99999999": 5}}),
        ),
        (
            "logit_bias out of range",
            "capstan-llama",
            json!({"logit_bias": {"17": 101}}),
        ),
        (
            "top_logprobs without logprobs",
            "capstan-llama",
            json!({"top_logprobs": 2}),
        ),
        (
            "top_logprobs past 20",
            "capstan-llama",
            json!({"logprobs": true, "top_logprobs": 21}),
        ),
        (
            "a JSON mode",
            "capstan-llama",
            json!({"response_format": {"type": "json_object"}}),
        ),
        (
            "a JSON schema",
            "capstan-llama",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}),
        ),
        (
            "tools",
            "capstan-llama",
            json!({"tools": [{"type": "function", "function": {"name": "f"}}]}),
        ),
        (
            "a required tool",
            "capstan-llama",
            json!({"tool_choice": "required"}),
        ),
        (
            "logprobs from the extractive reader",
            "capstan-extractive",
            json!({"logprobs": true}),
        ),
        (
            "a penalty for the extractive reader",
            "capstan-extractive",
            json!({"presence_penalty": 1}),
        ),
        (
            "a logit bias for the extractive reader",
            "capstan-extractive",
            json!({"logit_bias": {"17": 5}}),
        ),
    ];
    for (what, model, extra) in refused {
        let r = srv.post("/v1/chat/completions", &body(model, extra));
        let (status, kind) = assert_client_error(what, &r);
        assert_eq!(
            (status, kind.as_str()),
            (400, "invalid_request_error"),
            "{what}"
        );
    }
    // What changes nothing is accepted: a text format, no tools, tool_choice none.
    for extra in [
        json!({"response_format": {"type": "text"}}),
        json!({"tools": [], "tool_choice": "none"}),
        json!({"logprobs": false}),
    ] {
        chat(extra);
    }
}
