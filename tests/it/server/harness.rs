//! Starts a real `kiln serve` process on a free port with the default model, one engine
//! thread and a small KV cache, and stops it (SIGTERM, then SIGKILL) when dropped. Every
//! server test goes through [`Server::start`].

use super::http::Client;
use crate::common::default_model;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a test server is configured.
#[derive(Debug, Clone)]
pub struct Options {
    /// Extra TOML appended to the generated config file.
    pub config: String,
    /// Extra command-line arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Wait for /ready before returning.
    pub wait_ready: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config: String::new(),
            args: Vec::new(),
            env: Vec::new(),
            wait_ready: true,
        }
    }
}

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// Everything the server wrote to stderr so far.
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// A server with the test defaults plus `opts`.
    pub fn start(opts: Options) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("kiln.toml");
        let text = format!(
            "[engine]\nthreads = 1\nkv_cache = 8192\n\n[scheduler]\nmax_num_seqs = 8\nmax_batch_tokens = 256\n\n{}\n",
            opts.config
        );
        std::fs::write(&config, text).expect("write config");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.arg("--config").arg(&config).arg("serve");
        if !opts.args.iter().any(|a| a == "--model") {
            cmd.arg("--model").arg(default_model());
        }
        cmd.args(["--port", "0", "--host", "127.0.0.1"])
            .args(&opts.args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // Settings from the developer's environment must not leak into the test server.
        for (k, _) in std::env::vars() {
            if k.starts_with("KILN_") && k != "KILN_ISA" {
                cmd.env_remove(k);
            }
        }
        // The config decides the level (`[log]`), whatever the environment running the tests says.
        cmd.env_remove("KILN_LOG").env_remove("RUST_LOG");
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn kiln serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = line.strip_prefix("kiln: listening on http://") {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(addr.trim().to_string());
                        }
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a.parse().expect("listening address"),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "kiln serve printed no listening line:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        let server = Server {
            child,
            addr,
            log,
            _dir: dir,
        };
        if opts.wait_ready {
            server.wait_ready();
        }
        server
    }

    /// The test defaults.
    pub fn default_server() -> Server {
        Server::start(Options::default())
    }

    pub fn client(&self) -> Client {
        Client {
            addr: self.addr,
            key: None,
        }
    }

    pub fn client_with_key(&self, key: &str) -> Client {
        Client {
            addr: self.addr,
            key: Some(key.to_string()),
        }
    }

    /// Waits until `/ready` answers 200.
    pub fn wait_ready(&self) {
        let c = self.client();
        let t0 = Instant::now();
        while c.get("/ready").status != 200 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "server not ready after 60 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if t0.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        self.signal(libc::SIGTERM);
        if self.wait_exit(Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `f` until true, failing after `limit` with `what`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out after {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}
