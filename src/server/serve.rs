//! `kiln serve`'s life: bind first (so `/health` answers and `/ready` says 503 while the
//! models load in the background), load the configured models, serve until SIGTERM/SIGINT,
//! then drain (see [`serve`]).

use crate::config::Config;
use crate::server::app_state::AppState;
use crate::server::registry::{self, ModelRegistry};
use crate::server::router;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long aborted requests get to send their last bytes, and connections to close, at
/// the end of a drain.
const FINAL_GRACE: Duration = Duration::from_secs(5);

/// Why `kiln serve` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot load the model: {0}")]
    Load(String),
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error("cannot install the signal handlers: {0}")]
    Signals(std::io::Error),
}

/// What [`serve`] needs beyond the configuration.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Every accepted API key (config, key file and environment, resolved by the caller).
    pub api_keys: Vec<String>,
    /// Testing only: faults injected into the engine.
    pub faults: Vec<crate::scheduler::fault::FaultInjection>,
}

/// Serves `cfg` until SIGTERM or SIGINT:
///
/// 1. binds `server.host:server.port` and prints `kiln: listening on http://ADDR` to stderr
///    (with the real port when the port is 0);
/// 2. loads the configured models on the blocking pool, in order ([`registry`]; a
///    `server.models_dir`'s load on first use); `/ready` turns 200 when they are loaded (a
///    server of one model stops with an error if it cannot load it, one of several serves
///    the others);
/// 3. on the first signal, drains: `/ready` and new requests get 503 at once, requests in
///    flight get up to `server.drain_timeout` to finish, then the rest are aborted (they end
///    with finish reason `abort`); a second signal cuts the wait short. Then the listener
///    closes, the engines stop, and `serve` returns Ok.
pub async fn serve(cfg: Config, opts: ServeOptions) -> Result<(), ServeError> {
    let mut signals = Signals::new().map_err(ServeError::Signals)?;
    let registry = ModelRegistry::new(&cfg, opts.faults.clone())?;
    let state = AppState::new(cfg.server.clone(), Arc::clone(&registry), opts.api_keys);
    let host = &cfg.server.host;
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{}", cfg.server.port)
    } else {
        format!("{host}:{}", cfg.server.port)
    };
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: addr.clone(),
            source,
        })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    eprintln!("kiln: listening on http://{local}");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let app = router(state.clone());
    let mut server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await
    });
    let sweeper = tokio::spawn(Arc::clone(&registry).sweep());

    // The configured models load now, in order; a server of one model stops if it cannot
    // load it, a server of several keeps serving the others.
    let startup = {
        let registry = Arc::clone(&registry);
        async move {
            let single = registry.len() == 1;
            for i in (0..registry.len()).filter(|&i| registry.model(i).eager) {
                if let Err(e) = registry.preload(i).await {
                    if single {
                        return Err(e);
                    }
                    tracing::error!(model = registry.routes().id(i), error = %e, "the model could not be loaded; serving the others");
                }
            }
            Ok(())
        }
    };
    tokio::select! {
        res = startup => {
            res.map_err(ServeError::Load)?;
            state.set_started();
            tracing::info!(
                models = registry.len(),
                loaded = registry.all_loaded().len(),
                default_model = state.model_id(),
                "ready"
            );
        }
        _ = signals.next() => {
            tracing::info!("signal received while loading: stopping");
            state.start_draining();
            let _ = stop_tx.send(());
            let _ = tokio::time::timeout(FINAL_GRACE, &mut server).await;
            return Ok(());
        }
    }

    signals.next().await;
    drain(&state, &mut signals).await;
    let _ = stop_tx.send(());
    if tokio::time::timeout(FINAL_GRACE, &mut server)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain: closing them");
        server.abort();
    }
    sweeper.abort();
    let _ = tokio::task::spawn_blocking(move || registry.shutdown_all()).await;
    tracing::info!("stopped");
    Ok(())
}

/// Refuses new work, lets requests in flight finish up to the drain timeout (or a second
/// signal), then aborts the rest and gives them a moment to send their last chunk.
async fn drain(state: &AppState, signals: &mut Signals) {
    state.start_draining();
    let limit = state.settings().drain_timeout;
    tracing::info!(in_flight = state.in_flight(), timeout = ?limit, "draining");
    let deadline = Instant::now() + limit;
    let wait = async {
        while state.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = tokio::time::timeout_at(deadline, wait) => {}
        _ = signals.next() => tracing::warn!("second signal: aborting requests in flight"),
    }
    if state.in_flight() > 0 {
        tracing::warn!(
            in_flight = state.in_flight(),
            "drain timeout: aborting requests"
        );
        for (_, rt) in state.registry().all_loaded() {
            rt.engine.abort_all();
        }
        let _ = tokio::time::timeout(FINAL_GRACE, async {
            while state.in_flight() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }
}

/// SIGTERM and SIGINT.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
