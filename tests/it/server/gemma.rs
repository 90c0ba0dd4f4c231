//! `kiln serve` on the real gemma-3-270m Q4_K_M file (a base model without a chat template):
//! completions give llama.cpp's greedy continuation (tests/data/gemma3_270m/golden.json),
//! chat is a clear 400 naming the missing template, and a configured template makes chat work.

use super::harness::{Options, Server};
use crate::common;
use kiln::gguf::GgufFile;
use kiln::tokenizer::Tokenizer;
use serde_json::{json, Value};

fn gemma() -> String {
    let p = common::repo_root().join("models/gemma-3-270m-Q4_K_M.gguf");
    assert!(
        p.is_file(),
        "{} is missing: run `scripts/fetch-model.sh gemma-3-270m` (make test does)",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

#[test]
fn gemma_serves_completions_and_refuses_chat_without_a_template() {
    let model = gemma();
    let golden: Value = serde_json::from_str(&common::read_to_string(
        &common::repo_root().join("tests/data/gemma3_270m/golden.json"),
    ))
    .expect("golden.json");
    let case = &golden["cases"][0];
    let generated: Vec<u32> = case["generated"]
        .as_array()
        .expect("generated")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect();
    let tok = Tokenizer::from_gguf(&GgufFile::open(&model).expect("open")).expect("tokenizer");
    let n = 12.min(generated.len());
    let want = tok.decode(&generated[..n]);

    let s = Server::start(Options {
        args: vec!["--model".into(), model.clone()],
        ..Options::default()
    });
    let c = s.client();
    let r = c.ok(
        "/v1/completions",
        &json!({"prompt": case["text"], "max_tokens": n, "temperature": 0}),
    );
    assert_eq!(
        r["choices"][0]["text"].as_str(),
        Some(want.as_str()),
        "greedy completion differs from llama.cpp's: {r}"
    );

    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    let r = c.post("/v1/chat/completions", &chat);
    assert_eq!(r.status, 400, "{}", r.text());
    let e = r.error();
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("no chat template")),
        "{e}"
    );
    drop(s);

    // With a template configured, chat works.
    let dir = tempfile::tempdir().expect("temp dir");
    let tpl = dir.path().join("plain.jinja");
    std::fs::write(
        &tpl,
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
         {% if add_generation_prompt %}assistant:{% endif %}",
    )
    .expect("write template");
    let s = Server::start(Options {
        args: vec![
            "--model".into(),
            model,
            "--chat-template".into(),
            tpl.to_string_lossy().into_owned(),
        ],
        ..Options::default()
    });
    let r = s.client().ok("/v1/chat/completions", &chat);
    assert!(r["choices"][0]["message"]["content"].is_string(), "{r}");
}
