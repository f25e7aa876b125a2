//! BEIR evaluation data: `queries.jsonl` and `qrels/SPLIT.tsv`.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::metrics::Judgements;

/// A BEIR query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Query id.
    pub id: String,
    /// Query text.
    pub text: String,
}

/// Queries that have judgements, with those judgements.
#[derive(Debug, Default)]
pub struct BeirQueries {
    /// Judged queries, in file order.
    pub queries: Vec<Query>,
    /// Query id -> judgements.
    pub qrels: HashMap<String, Judgements>,
}

/// Loads `dir/queries.jsonl` and `dir/qrels/test.tsv`, keeping the queries
/// that have at least one judgement.
pub fn load_beir(dir: &Path) -> Result<BeirQueries> {
    load_beir_split(dir, "test")
}

/// Loads `dir/queries.jsonl` and `dir/qrels/{split}.tsv` (`dev` to choose
/// settings, `test` to report them), keeping the queries judged there.
pub fn load_beir_split(dir: &Path, split: &str) -> Result<BeirQueries> {
    let qrels = read_qrels(&dir.join("qrels").join(format!("{split}.tsv")))?;
    let qpath = dir.join("queries.jsonl");
    let content = std::fs::read_to_string(&qpath).map_err(|e| Error::Dataset {
        path: qpath.clone(),
        line: 0,
        message: e.to_string(),
    })?;
    let mut queries = Vec::new();
    for (i, line) in content.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| Error::Dataset {
            path: qpath.clone(),
            line: i + 1,
            message,
        };
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(format!("malformed JSON: {e}")))?;
        let id = match v.get("_id") {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => return Err(bad("missing field `_id`".into())),
        };
        let text = v
            .get("text")
            .and_then(|t| t.as_str())
            .ok_or_else(|| bad("missing field `text`".into()))?
            .to_string();
        if qrels.contains_key(&id) {
            queries.push(Query { id, text });
        }
    }
    if queries.is_empty() {
        return Err(Error::Dataset {
            path: qpath,
            line: 0,
            message: "no query has judgements in qrels/test.tsv".into(),
        });
    }
    Ok(BeirQueries { queries, qrels })
}

fn read_qrels(path: &Path) -> Result<HashMap<String, Judgements>> {
    let content = std::fs::read_to_string(path).map_err(|e| Error::Dataset {
        path: path.to_path_buf(),
        line: 0,
        message: e.to_string(),
    })?;
    let mut qrels: HashMap<String, Judgements> = HashMap::new();
    for (i, line) in content.lines().enumerate() {
        let cols: Vec<&str> = line.split('\t').collect();
        if line.trim().is_empty() || (i == 0 && cols.first() == Some(&"query-id")) {
            continue;
        }
        let bad = |message: String| Error::Dataset {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        if cols.len() != 3 {
            return Err(bad(format!(
                "expected 3 tab-separated columns, found {}",
                cols.len()
            )));
        }
        let grade: i32 = cols[2]
            .trim()
            .parse()
            .map_err(|_| bad(format!("score `{}` is not an integer", cols[2])))?;
        qrels
            .entry(cols[0].to_string())
            .or_default()
            .insert(cols[1].to_string(), grade);
    }
    Ok(qrels)
}
