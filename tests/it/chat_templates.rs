//! Chat-template conformance: every `*.cases.json` in ../shared/conformance/chat-templates and
//! in tests/data/chat-templates (the families the shared corpus lacks: Gemma 3, Qwen3 with
//! `enable_thinking`, Phi-4-mini, SmolLM3, Granite 3.3; recorded by
//! scripts/reference/chat_template_cases.py with the same Python reference) rendered byte for
//! byte as the reference did (and refused where it refused), plus
//! `kiln render-template` run as a binary on one case.

use crate::common;
use kiln::chat_template::{ChatTemplate, DateTime};
use std::path::PathBuf;

fn case_files() -> Vec<PathBuf> {
    let dirs = [
        common::shared_dir().join("conformance/chat-templates"),
        common::repo_root().join("tests/data/chat-templates"),
    ];
    let mut all = Vec::new();
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".cases.json"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no *.cases.json in {}", dir.display());
        all.extend(files);
    }
    all
}

#[test]
fn conformance_cases_render_exactly() {
    let (mut passed, mut total) = (0usize, 0usize);
    let mut failures = Vec::new();
    for file in case_files() {
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let doc: serde_json::Value = serde_json::from_str(&common::read_to_string(&file))
            .unwrap_or_else(|e| panic!("{name}: bad JSON: {e}"));
        let template_file = doc["template"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no template"));
        let source = common::read_to_string(&file.with_file_name(template_file));
        let now = doc["now"]
            .as_str()
            .map(|s| DateTime::parse_iso(s).unwrap_or_else(|| panic!("{name}: bad now {s:?}")));
        let cases = doc["cases"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no cases"));
        let template = ChatTemplate::new(&source);
        let mut file_passed = 0;
        for case in cases {
            let case_name = case["name"].as_str().unwrap_or("?");
            let result = template
                .as_ref()
                .map_err(|e| e.to_string())
                .and_then(|t| t.render(&case["context"], now).map_err(|e| e.to_string()));
            let ok = match (case.get("output").and_then(|o| o.as_str()), &result) {
                (Some(expected), Ok(got)) => expected == got,
                (None, Err(_)) => case.get("error").is_some(),
                _ => false,
            };
            if ok {
                file_passed += 1;
            } else {
                failures.push(format!(
                    "{name} / {case_name}: {}",
                    describe_mismatch(case, &result)
                ));
            }
        }
        println!("{name}: {file_passed}/{}", cases.len());
        passed += file_passed;
        total += cases.len();
    }
    println!("chat template conformance: {passed}/{total} cases byte-exact");
    for f in &failures {
        println!("FAIL {f}");
    }
    assert_eq!(passed, total, "{} conformance failures", failures.len());
}

/// Where a rendering first differs from the expected text, with some context either side.
fn describe_mismatch(case: &serde_json::Value, result: &Result<String, String>) -> String {
    match (case.get("output").and_then(|o| o.as_str()), result) {
        (Some(expected), Ok(got)) => {
            let at = expected
                .bytes()
                .zip(got.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(expected.len().min(got.len()));
            let window = |s: &str| {
                let lo = s.floor_char_boundary(at.saturating_sub(80));
                let hi = s.ceil_char_boundary((at + 80).min(s.len()));
                format!("{:?}", &s[lo..hi])
            };
            format!(
                "differs at byte {at}\n  expected: {}\n  got:      {}",
                window(expected),
                window(got)
            )
        }
        (Some(_), Err(e)) => format!("expected output, got error: {e}"),
        (None, Ok(got)) => format!(
            "expected error {:?}, got output {:?}",
            case.get("error"),
            got
        ),
        (None, Err(e)) => format!("case has neither output nor error; got error {e}"),
    }
}

/// Runs `kiln render-template` on the first conformance case with an expected output and checks
/// stdout is exactly that output; then checks a refusing template exits non-zero with stderr.
#[test]
fn render_template_cli_prints_exactly() {
    let dir = common::shared_dir().join("conformance/chat-templates");
    let file = dir.join("Qwen-Qwen2.5-7B-Instruct.cases.json");
    let doc: serde_json::Value =
        serde_json::from_str(&common::read_to_string(&file)).expect("cases JSON");
    let case = &doc["cases"][0];
    let expected = case["output"].as_str().expect("case 0 has an output");
    let tmp = tempfile::tempdir().expect("temp dir");
    let ctx_path = tmp.path().join("context.json");
    std::fs::write(&ctx_path, case["context"].to_string()).expect("write context");
    let template = dir.join(doc["template"].as_str().expect("template name"));

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("render-template")
        .arg("--template")
        .arg(&template)
        .arg("--context")
        .arg(&ctx_path)
        .args(["--now", doc["now"].as_str().expect("now")])
        .output()
        .expect("run kiln");
    assert!(
        out.status.success(),
        "kiln failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        expected
    );

    let refusing = tmp.path().join("refuse.jinja");
    std::fs::write(&refusing, "{{ raise_exception('no system role') }}").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("render-template")
        .arg("--template")
        .arg(&refusing)
        .arg("--context")
        .arg(&ctx_path)
        .output()
        .expect("run kiln");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no system role"));
}
