//! End-to-end: what `capstan serve` refuses when it starts (a KV budget that holds no request,
//! an empty API key) and what its API key guards (every route but `/health`).

mod common;
mod http;

use common::{capstan, questions, s};
use http::*;
use serde_json::json;

/// A KV budget that could not hold one request is refused when the server starts, naming
/// the flag, not by every request as if the client were wrong.
#[test]
fn a_kv_budget_too_small_for_any_request_is_refused_at_start() {
    let f = fixture();
    for budget in ["0", "64"] {
        let out = capstan()
            .args(["serve", "--index", s(&f.index), "--addr", "127.0.0.1:1"])
            .args([
                "--llama-model",
                s(&common::smollm2()),
                "--kv-tokens",
                budget,
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("--kv-tokens {budget} cannot hold one request")),
            "{stderr}"
        );
    }
}

#[test]
fn an_empty_or_blank_api_key_is_refused_at_start() {
    let f = fixture();
    for (args, env) in [
        (vec!["--api-key", ""], vec![]),
        (vec!["--api-key", "  "], vec![]),
        (vec![], vec![("CAPSTAN_API_KEY", "")]),
    ] {
        let out = capstan()
            .args(["serve", "--index", s(&f.index), "--addr", "127.0.0.1:0"])
            .args(["--no-default-model"])
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {env:?}: served");
        assert!(err.contains("API key is empty or blank"), "{err}");
    }
}

#[test]
fn api_key_guards_every_route_but_health() {
    let f = fixture();
    let srv = Server::start(&f.index, &["--api-key", "s3cret-key"]);
    let question = questions(&f.data)[0].clone();
    let body = json!({"question": question}).to_string();
    let post = |headers: &[(&str, &str)]| {
        let mut h = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        srv.call("POST", "/v1/qa", &h, Some(body.as_bytes()))
    };
    let cases = [
        ("missing key", post(&[])),
        ("wrong key", post(&[("Authorization", "Bearer nope")])),
        (
            "key as a prefix",
            post(&[("Authorization", "Bearer s3cret")]),
        ),
        (
            "key not Bearer",
            post(&[("Authorization", "Basic s3cret-key")]),
        ),
        ("empty Bearer", post(&[("Authorization", "Bearer ")])),
        ("models without key", srv.get("/v1/models")),
        ("metrics without key", srv.get("/metrics")),
        ("openapi without key", srv.get("/openapi.json")),
        ("unknown route without key", srv.get("/v1/nothing")),
    ];
    for (what, r) in &cases {
        let (status, kind) = assert_client_error(what, r);
        assert_eq!(status, 401, "{what}: {}", r.text());
        assert_eq!(kind, "authentication_error", "{what}");
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{what}");
    }
    // /health needs no key; the web page takes it as a header or as ?key=.
    assert_eq!(srv.get("/health").status, 200);
    for (what, r) in [
        ("page without key", srv.get("/")),
        ("page with a wrong key", srv.get("/?key=nope")),
        (
            "page with the key in another parameter",
            srv.get("/?k=s3cret-key"),
        ),
        (
            "key in the query of an API route",
            srv.get("/v1/models?key=s3cret-key"),
        ),
    ] {
        let (status, kind) = assert_client_error(what, &r);
        assert_eq!(
            (status, kind.as_str()),
            (401, "authentication_error"),
            "{what}"
        );
    }
    let page = srv.get("/?key=s3cret-key");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<html"), "the page itself");
    let page = srv.call("GET", "/", &[("Authorization", "Bearer s3cret-key")], None);
    assert_eq!(page.status, 200);
    let good = post(&[("Authorization", "Bearer s3cret-key")]).ok_json();
    assert!(!good["answer"].as_str().unwrap().is_empty());
    let lower = post(&[("Authorization", "bearer s3cret-key")]);
    assert_eq!(
        lower.status,
        200,
        "the auth scheme is case-insensitive: {}",
        lower.text()
    );
    let spec = srv
        .call(
            "GET",
            "/openapi.json",
            &[("Authorization", "Bearer s3cret-key")],
            None,
        )
        .ok_json();
    assert_eq!(
        spec["security"],
        json!([{"bearer": []}]),
        "the spec says a key is needed"
    );
    assert_eq!(spec["paths"]["/health"]["get"]["security"], json!([]));
    let models = srv.call(
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer s3cret-key")],
        None,
    );
    assert_eq!(models.status, 200);
}
