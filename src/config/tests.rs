use super::*;
use std::io::Write;

#[test]
fn empty_file_is_default() {
    assert_eq!(Config::parse("").unwrap(), Config::default());
    assert_eq!(Config::load(None, &[]).unwrap(), Config::default());
}

#[test]
fn shipped_default_parses() {
    let text = include_str!("../../config/default.toml");
    let c = Config::parse(text).unwrap();
    assert_eq!(c.model_path, PathBuf::from(DEFAULT_MODEL_PATH));
    // Every value the shipped file writes out is the built-in default.
    assert_eq!(c, Config::default());
}

#[test]
fn unknown_key_is_rejected() {
    let e = Config::parse("[engine]\nthreadz = 2\n").unwrap_err();
    assert!(e.to_string().contains("threadz"), "{e}");
}

#[test]
fn kv_type_setting() {
    use crate::engine::kv_cache::KvType;
    assert_eq!(Config::parse("").unwrap().kv_type, KvType::F16);
    let c = Config::parse("[engine]\nkv_type = \"q8_0\"\n").unwrap();
    assert_eq!(c.kv_type, KvType::Q8_0);
    assert_eq!(
        c.models[0].kv_type,
        KvType::Q8_0,
        "[model] takes [engine]'s"
    );
    let c = Config::parse(
        "[engine]\nkv_type = \"q8_0\"\n[[models]]\npath = \"a.gguf\"\n[[models]]\npath = \"b.gguf\"\nkv_type = \"f16\"\n",
    )
    .unwrap();
    assert_eq!(
        (c.models[0].kv_type, c.models[1].kv_type),
        (KvType::Q8_0, KvType::F16)
    );
    assert_eq!(c.for_model(&c.models[1]).kv_type, KvType::F16);
    let e = Config::parse("[engine]\nkv_type = \"q4_0\"\n").unwrap_err();
    assert!(
        e.to_string().contains("engine.kv_type") && e.to_string().contains("q8_0"),
        "{e}"
    );
    let e = Config::parse("[[models]]\npath = \"a.gguf\"\nkv_type = \"fp8\"\n").unwrap_err();
    assert!(e.to_string().contains("models.kv_type"), "{e}");
}

#[test]
fn kv_budget_forms() {
    let c = Config::parse("[engine]\nkv_cache = \"512MiB\"\n").unwrap();
    assert_eq!(c.kv_cache, KvBudget::Bytes(512 << 20));
    let c = Config::parse("[engine]\nkv_cache = 4096\n").unwrap();
    assert_eq!(c.kv_cache, KvBudget::Positions(4096));
    assert_eq!(c.kv_cache.bytes(100, None), 409_600);
    let c = Config::parse("[engine]\nkv_cache = \"auto\"\n").unwrap();
    assert_eq!(c.kv_cache.bytes(1, Some(8 << 30)), (8u64 << 30) / 100 * 10);
    assert_eq!(c.kv_cache.bytes(1, Some(1 << 40)), KV_AUTO_CAP_BYTES);
    let e = Config::parse("[engine]\nkv_cache = \"lots\"\n").unwrap_err();
    assert!(e.to_string().contains("engine.kv_cache"), "{e}");
    assert_eq!(parse_bytes("1.5GB"), Some(1_500_000_000));
    assert_eq!(parse_bytes("2 GiB"), Some(2 << 30));
    assert_eq!(parse_bytes("-1GiB"), None);
}

#[test]
fn scheduler_limits_are_checked() {
    let e = Config::parse("[scheduler]\nmax_num_seqs = 0\n").unwrap_err();
    assert!(e.to_string().contains("scheduler.max_num_seqs"), "{e}");
    let e = Config::parse("[scheduler]\nmax_num_seqs = 64\nmax_batch_tokens = 32\n").unwrap_err();
    assert!(e.to_string().contains("max_batch_tokens"), "{e}");
    let e = Config::parse("[scheduler]\nmax_nums_seqs = 4\n").unwrap_err();
    assert!(e.to_string().contains("max_nums_seqs"), "{e}");
}

/// Settings that would leave a server that starts but cannot serve (or hangs) are errors
/// naming their key.
#[test]
fn degenerate_settings_are_errors_naming_the_key() {
    for (text, key) in [
        ("[scheduler]\nmax_waiting = 0\n", "scheduler.max_waiting"),
        ("[scheduler]\nmax_num_seqs = 0\n", "scheduler.max_num_seqs"),
        (
            "[scheduler]\nmax_batch_tokens = 0\n",
            "scheduler.max_batch_tokens",
        ),
        (
            "[scheduler]\nmax_prefill_while_decoding = 0\n",
            "scheduler.max_prefill_while_decoding",
        ),
        ("[engine]\nworkers = 0\n", "engine.workers"),
        ("[engine]\nkv_cache = 0\n", "engine.kv_cache"),
        ("[engine]\nkv_cache = \"0MiB\"\n", "engine.kv_cache"),
        ("[server]\nmax_tokens_cap = 0\n", "server.max_tokens_cap"),
        (
            "[server]\nmax_tokens_default = 0\n",
            "server.max_tokens_default",
        ),
        ("[server]\nmax_n = 0\n", "server.max_n"),
        ("[server]\nmax_body_bytes = 0\n", "server.max_body_bytes"),
        (
            "[server]\nmax_body_bytes = \"8MiB\"\nmax_body_bytes_in_flight = \"4MiB\"\n",
            "server.max_body_bytes_in_flight",
        ),
        (
            "[server]\nmax_in_flight_requests = 0\n",
            "server.max_in_flight_requests",
        ),
        (
            "[server]\ncors_allowed_origins = [\"*\", \"https://a.example\"]\n",
            "server.cors_allowed_origins",
        ),
        (
            "[server]\ncors_allowed_origins = [\"https://a.example/path\"]\n",
            "server.cors_allowed_origins",
        ),
        (
            "[server]\nrequest_timeout = 0.001\n",
            "server.request_timeout",
        ),
        ("[server]\nsse_keep_alive = 0\n", "server.sse_keep_alive"),
        ("[server]\nhost = \" \"\n", "server.host"),
        ("[log]\nlevel = \"\"\n", "log.level"),
    ] {
        let e = Config::parse(text).expect_err(text);
        assert!(
            matches!(&e, ConfigError::Invalid { key: k, .. } if *k == key),
            "{text}: {e}"
        );
    }
}

#[test]
fn server_settings_and_overrides() {
    let c = Config::parse(
        "[server]\nport = 0\nmax_body_bytes = \"64KiB\"\nrequest_timeout = 0\napi_keys = [\"k1\"]\n",
    )
    .unwrap();
    assert_eq!(c.server.port, 0);
    assert_eq!(c.server.max_body_bytes, 64 << 10);
    assert_eq!(c.server.request_timeout, None);
    // Keys never show in Debug output (the effective config is logged).
    assert!(!format!("{c:?}").contains("k1"));
    let c =
        Config::parse("[log]\nlevel = \"warn,kiln::access=info\"\nformat = \"JSON\"\n").unwrap();
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(c.log.level, "warn,kiln::access=info");
    let e = Config::parse("[log]\nformat = \"xml\"\n").unwrap_err();
    assert!(e.to_string().contains("log.format"), "{e}");
    let e = Config::parse("[server]\nportt = 1\n").unwrap_err();
    assert!(e.to_string().contains("portt"), "{e}");
    let e = Config::parse("[server]\ndrain_timeout = -1\n").unwrap_err();
    assert!(e.to_string().contains("server.drain_timeout"), "{e}");
}

/// One way in: a file, overrides over it, one validation; errors name the file.
#[test]
fn load_reads_a_file_then_overrides() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(b"[server]\nport = 1\n").unwrap();
    let c = Config::load(
        Some(f.path()),
        &[
            ("server.port", toml::Value::Integer(9)),
            ("model.name", toml::Value::String("m".into())),
        ],
    )
    .unwrap();
    assert_eq!((c.server.port, c.model_name.as_deref()), (9, Some("m")));
    let e = Config::load(None, &[("server.max_n", toml::Value::Integer(99))]).unwrap_err();
    assert!(e.to_string().contains("server.max_n"), "{e}");
    let e = Config::load(None, &[("scheduler.max_waiting", toml::Value::Integer(0))]).unwrap_err();
    assert!(e.to_string().contains("scheduler.max_waiting"), "{e}");
    let mut bad = tempfile::NamedTempFile::new().unwrap();
    bad.write_all(b"[server\n").unwrap();
    let e = Config::load(Some(bad.path()), &[]).unwrap_err();
    assert!(
        e.to_string().contains(&bad.path().display().to_string()),
        "{e}"
    );
    let e = Config::load(Some(Path::new("/nonexistent/kiln.toml")), &[]).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }), "{e}");
}

#[test]
fn absurd_threads_rejected() {
    let e = Config::parse("[engine]\nthreads = 100000\n").unwrap_err();
    assert!(e.to_string().contains("engine.threads"), "{e}");
}

#[test]
fn one_model_by_default_and_models_entries_replace_it() {
    let c = Config::parse("").unwrap();
    assert_eq!(c.models.len(), 1);
    assert_eq!(c.models[0].path, PathBuf::from(DEFAULT_MODEL_PATH));
    assert_eq!(c.models[0].id(), "SmolLM2-135M-Instruct.Q4_1");
    let c = Config::parse(
        "[model]\nname = \"one\"\naliases = [\"gpt-4\"]\n[engine]\nworkers = 2\nkv_cache = 4096\n",
    )
    .unwrap();
    assert_eq!(c.models[0].ids(), ["one", "gpt-4"]);
    assert_eq!(c.models[0].workers, 2);
    assert_eq!(c.models[0].kv_cache, KvBudget::Positions(4096));

    let c = Config::parse(
        "[engine]\nthreads = 2\nkv_cache = \"64MiB\"\n\n\
         [[models]]\npath = \"a.gguf\"\n\n\
         [[models]]\npath = \"dir/b.gguf\"\nname = \"bee\"\naliases = [\"b2\", \" \"]\n\
         kv_cache = 1024\nworkers = 3\nthreads = 1\nchat_template = \"t.jinja\"\n",
    )
    .unwrap();
    assert_eq!(c.models.len(), 2);
    let (a, b) = (&c.models[0], &c.models[1]);
    assert_eq!((a.id(), a.threads, a.workers), ("a".to_string(), 2, 1));
    assert_eq!(a.kv_cache, KvBudget::Bytes(64 << 20));
    assert_eq!(b.ids(), ["bee", "b2"]);
    assert_eq!((b.threads, b.workers), (1, 3));
    assert_eq!(b.kv_cache, KvBudget::Positions(1024));
    assert_eq!(b.chat_template.as_deref(), Some(Path::new("t.jinja")));
    // What the engine setup reads for one of them.
    let one = c.for_model(b);
    assert_eq!(one.model_path, PathBuf::from("dir/b.gguf"));
    assert_eq!((one.workers, one.kv_cache), (3, KvBudget::Positions(1024)));
}

#[test]
fn pooling_is_set_per_model_over_the_file() {
    use crate::engine::pooling::Pooling;
    // Unset: the file's pooling_type decides (None here).
    let c = Config::parse("").unwrap();
    assert_eq!((c.pooling, c.models[0].pooling), (None, None));
    let c = Config::parse("[model]\npooling = \"last\"\n").unwrap();
    assert_eq!(c.pooling, Some(Pooling::Last));
    assert_eq!(c.models[0].pooling, Some(Pooling::Last));
    let c = Config::parse(
        "[[models]]\npath = \"a.gguf\"\npooling = \"CLS\"\n[[models]]\npath = \"b.gguf\"\n",
    )
    .unwrap();
    assert_eq!(c.models[0].pooling, Some(Pooling::Cls));
    assert_eq!(c.models[1].pooling, None);
    // What the engine setup reads for each.
    assert_eq!(c.for_model(&c.models[0]).pooling, Some(Pooling::Cls));
    assert_eq!(c.for_model(&c.models[1]).pooling, None);
    for (text, key) in [
        ("[model]\npooling = \"max\"\n", "model.pooling"),
        ("[model]\npooling = \"rank\"\n", "model.pooling"),
        (
            "[[models]]\npath = \"a.gguf\"\npooling = \"none\"\n",
            "models.pooling",
        ),
    ] {
        let e = Config::parse(text).expect_err(text);
        assert!(
            matches!(&e, ConfigError::Invalid { key: k, .. } if *k == key),
            "{text}: {e}"
        );
        assert!(
            e.to_string().contains("\"mean\", \"cls\" or \"last\""),
            "{e}"
        );
    }
}

#[test]
fn models_entries_are_checked() {
    for (text, key) in [
        ("[[models]]\nname = \"x\"\n", "models.path"),
        (
            "[[models]]\npath = \"a.gguf\"\nname = \" \"\n",
            "models.name",
        ),
        (
            "[[models]]\npath = \"a.gguf\"\nworkers = 0\n",
            "models.workers",
        ),
        (
            "[[models]]\npath = \"a.gguf\"\nkv_cache = 0\n",
            "models.kv_cache",
        ),
        (
            "[[models]]\npath = \"a.gguf\"\nthreads = 99999\n",
            "models.threads",
        ),
        // Two files with one stem, or an alias naming another model.
        (
            "[[models]]\npath = \"x/a.gguf\"\n[[models]]\npath = \"y/a.gguf\"\n",
            "models.name",
        ),
        (
            "[[models]]\npath = \"a.gguf\"\n[[models]]\npath = \"b.gguf\"\naliases = [\"a\"]\n",
            "models.name",
        ),
        (
            "[server]\nmodels_memory_budget = \"lots\"\n",
            "server.models_memory_budget",
        ),
        (
            "[server]\nmodels_memory_budget = 100\n",
            "server.models_memory_budget",
        ),
        (
            "[server]\nmodels_load_timeout = 0\n",
            "server.models_load_timeout",
        ),
        (
            "[server]\nmodels_keep_alive = -1\n",
            "server.models_keep_alive",
        ),
    ] {
        let e = Config::parse(text).expect_err(text);
        assert!(
            matches!(&e, ConfigError::Invalid { key: k, .. } if *k == key),
            "{text}: {e}"
        );
    }
    let e = Config::parse("[[models]]\npath = \"a.gguf\"\nthredas = 1\n").unwrap_err();
    assert!(e.to_string().contains("thredas"), "{e}");
}

#[test]
fn models_dir_budget_and_keep_alive() {
    let c = Config::parse(
        "[server]\nmodels_dir = \"/m\"\nmodels_memory_budget = \"2GiB\"\nmodels_keep_alive = 300\n\
         models_load_timeout = 5\n",
    )
    .unwrap();
    // The directory serves every model: `[model]` names none.
    assert!(c.models.is_empty());
    assert_eq!(c.server.models_dir.as_deref(), Some(Path::new("/m")));
    assert_eq!(c.server.models_memory_budget, Some(2 << 30));
    assert_eq!(
        c.server.models_keep_alive,
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(
        c.server.models_load_timeout,
        std::time::Duration::from_secs(5)
    );
    // A `[model]` path is served beside the directory's files.
    let c = Config::parse("[model]\npath = \"a.gguf\"\n[server]\nmodels_dir = \"/m\"\n").unwrap();
    assert_eq!(c.models.len(), 1);
    // Defaults: no budget, no idle unload.
    let c = Config::parse("[server]\nmodels_memory_budget = \"unlimited\"\n").unwrap();
    assert_eq!(c.server.models_memory_budget, None);
    assert_eq!(c.server.models_keep_alive, None);
    // `--model a --model b` is a `models` override.
    let paths = toml::Value::Array(
        ["a.gguf", "b.gguf"]
            .iter()
            .map(|p| {
                let mut t = toml::Table::new();
                t.insert("path".into(), toml::Value::String(p.to_string()));
                toml::Value::Table(t)
            })
            .collect(),
    );
    let c = Config::load(None, &[("models", paths)]).unwrap();
    assert_eq!(
        c.models.iter().map(|m| m.id()).collect::<Vec<_>>(),
        ["a", "b"]
    );
}

#[test]
fn model_name_settings() {
    let c = Config::parse("").unwrap();
    assert_eq!(c.server.default_model, None);
    assert!(!c.server.strict_model_names);
    let c =
        Config::parse("[server]\ndefault_model = \" smol \"\nstrict_model_names = true\n").unwrap();
    assert_eq!(c.server.default_model.as_deref(), Some("smol"));
    assert!(c.server.strict_model_names);
    // Blank: none.
    let c = Config::parse("[server]\ndefault_model = \"\"\n").unwrap();
    assert_eq!(c.server.default_model, None);
    let e = Config::parse("[server]\nstrict_model_names = \"yes\"\n").unwrap_err();
    assert!(e.to_string().contains("strict_model_names"), "{e}");
}

#[test]
fn cache_tiers_parse_sizes_and_need_ram_for_a_disk_tier() {
    use toml::Value;
    let c = Config::load(
        None,
        &[
            ("cache.ram_bytes", Value::String("2GiB".into())),
            ("cache.dir", Value::String("/var/cache/kiln".into())),
            ("cache.disk_bytes", Value::Integer(1 << 20)),
        ],
    )
    .unwrap();
    assert_eq!(c.cache.ram_bytes, 2 << 30);
    assert_eq!(c.cache.disk_bytes, 1 << 20);
    assert_eq!(
        c.cache.dir.as_deref(),
        Some(std::path::Path::new("/var/cache/kiln"))
    );
    assert_eq!(Config::default().cache.dir, None);
    for (key, v, why) in [
        (
            "cache.ram_bytes",
            Value::String("lots".into()),
            "cache.ram_bytes",
        ),
        ("cache.dir", Value::String(String::new()), "cache.dir"),
    ] {
        let e = Config::load(None, &[(key, v)]).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
    }
    let e = Config::load(
        None,
        &[
            ("cache.ram_bytes", Value::Integer(0)),
            ("cache.dir", Value::String("/tmp/x".into())),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("cache.dir"), "{e}");
}

#[test]
fn speculative_section() {
    let c = Config::parse("").unwrap();
    assert_eq!(c.speculative.method, SpeculativeMethod::Ngram);
    let c =
        Config::parse("[speculative]\nmethod = \"off\"\nmax_draft = 4\nngram_min = 1\n").unwrap();
    assert_eq!(c.speculative.method, SpeculativeMethod::Off);
    assert_eq!((c.speculative.max_draft, c.speculative.ngram_min), (4, 1));
    // llama-server's --spec-type spelling.
    let c = Config::parse("[speculative]\nmethod = \"ngram-simple\"\n").unwrap();
    assert_eq!(c.speculative.method, SpeculativeMethod::Ngram);
    // A draft model alone asks for the draft method; an entry's `draft` for that entry.
    let c = Config::parse("[speculative]\ndraft_model = \"d.gguf\"\n").unwrap();
    assert_eq!(c.speculative.method, SpeculativeMethod::Draft);
    let c = Config::parse(
        "[[models]]\npath = \"a.gguf\"\ndraft = \"d.gguf\"\n[[models]]\npath = \"b.gguf\"\n",
    )
    .unwrap();
    let a = c.for_model(&c.models[0]).speculative;
    assert_eq!(a.method, SpeculativeMethod::Draft);
    assert_eq!(
        a.draft_model.as_deref(),
        Some(std::path::Path::new("d.gguf"))
    );
    let b = c.for_model(&c.models[1]).speculative;
    assert_eq!((b.method, b.draft_model), (SpeculativeMethod::Ngram, None));
    for (text, key) in [
        (
            "[speculative]\nmethod = \"draft\"\n",
            "speculative.draft_model",
        ),
        ("[speculative]\nmethod = \"eagle\"\n", "speculative.method"),
        (
            "[speculative]\nmethod = \"ngram\"\ndraft_model = \"d.gguf\"\n",
            "speculative.draft_model",
        ),
        (
            "[speculative]\ndraft_model = \"\"\n",
            "speculative.draft_model",
        ),
        (
            "[speculative]\nmethod = \"draft\"\n[[models]]\npath = \"a.gguf\"\n",
            "speculative.draft_model",
        ),
        ("[speculative]\nmax_draft = 33\n", "speculative.max_draft"),
        ("[speculative]\nmin_draft = 0\n", "speculative.min_draft"),
        ("[speculative]\nngram_min = 5\n", "speculative.ngram_min"),
        ("[speculative]\nmax_seqs = 0\n", "speculative.max_seqs"),
    ] {
        let e = Config::parse(text).unwrap_err();
        assert!(e.to_string().contains(key), "{text}: {e}");
    }
    // A flag or variable is checked like the file.
    let e = Config::load(
        None,
        &[("speculative.method", toml::Value::String("x".into()))],
    )
    .unwrap_err();
    assert!(e.to_string().contains("speculative.method"), "{e}");
}
