//! What every handler shares: the settings, the served models ([`ModelRegistry`]) and the
//! server's phase (loading, ready, draining). Requests in flight are counted so a drain knows
//! when it is done.

use crate::config::ServerSettings;
use crate::metrics::window::StatsWindow;
use crate::metrics::Metrics;
use crate::server::capacity::Admission;
use crate::server::error::ApiError;
use crate::server::registry::{Lease, ModelRegistry};
use crate::server::response_store::ResponseStore;
pub use crate::server::runtime::{has_chatml_markers, Runtime, RuntimeError};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the server is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerPhase {
    Loading,
    Ready,
    /// SIGTERM received: finishing requests in flight, refusing new ones.
    Draining,
    /// A fault ended the requests an engine worker held; the worker is being rebuilt. Not
    /// ready, but requests are taken: they wait for the rebuild (milliseconds).
    Recovering,
    /// An engine worker failed and could not be rebuilt: every request is refused, and
    /// `/health` says 503 so the process gets restarted.
    Failed,
}

/// State shared by every handler (cheap to clone).
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Shared>,
}

struct Shared {
    admission: Arc<Admission>,
    settings: ServerSettings,
    registry: Arc<ModelRegistry>,
    created: u64,
    api_keys: Vec<String>,
    /// The models loaded at start-up are (the server is past [`ServerPhase::Loading`]).
    started: AtomicBool,
    draining: AtomicBool,
    in_flight: AtomicUsize,
    /// Stored Responses-API responses (`previous_response_id`).
    responses: ResponseStore,
}

impl AppState {
    /// The server over `registry` (its first model is the default one); `api_keys` empty means
    /// no authentication. Each model's metrics and stats window are fed by its engine; the
    /// HTTP middleware counts on the default model's.
    pub fn new(
        settings: ServerSettings,
        registry: Arc<ModelRegistry>,
        api_keys: Vec<String>,
    ) -> Self {
        AppState {
            inner: Arc::new(Shared {
                responses: ResponseStore::new(
                    settings.responses_store_entries,
                    settings.responses_store_ttl,
                ),
                admission: Arc::new(Admission::new(
                    settings.max_in_flight_requests,
                    settings.max_body_bytes_in_flight,
                )),
                settings,
                registry,
                created: unix_now(),
                api_keys,
                started: AtomicBool::new(false),
                draining: AtomicBool::new(false),
                in_flight: AtomicUsize::new(0),
            }),
        }
    }

    pub fn settings(&self) -> &ServerSettings {
        &self.inner.settings
    }

    /// The capacity limits requests pass before any work is done for them.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.inner.admission
    }

    pub fn registry(&self) -> &Arc<ModelRegistry> {
        &self.inner.registry
    }

    /// The stored responses of `/v1/responses`.
    pub fn responses(&self) -> &ResponseStore {
        &self.inner.responses
    }

    /// The default model's metrics (where HTTP requests are counted).
    pub fn metrics(&self) -> &Metrics {
        &self.inner.registry.model(0).metrics
    }

    /// The default model's stats window.
    pub fn stats(&self) -> &StatsWindow {
        &self.inner.registry.model(0).stats
    }

    /// Every served id and alias, model by model.
    pub fn model_ids(&self) -> Vec<String> {
        self.inner.registry.routes().all()
    }

    /// The default model's id.
    pub fn model_id(&self) -> &str {
        self.inner.registry.routes().id(0)
    }

    /// When the server started (unix seconds): the models' `created`.
    pub fn created(&self) -> u64 {
        self.inner.created
    }

    pub fn api_keys(&self) -> &[String] {
        &self.inner.api_keys
    }

    /// The start-up loads are done: the server becomes ready.
    pub fn set_started(&self) {
        self.inner.started.store(true, Ordering::Release);
    }

    /// The default model's engine when it is loaded, whatever the phase.
    pub fn loaded(&self) -> Option<Arc<Runtime>> {
        self.inner.registry.loaded(0)
    }

    pub fn start_draining(&self) {
        self.inner.draining.store(true, Ordering::Release);
    }

    pub fn phase(&self) -> ServerPhase {
        if self.inner.draining.load(Ordering::Acquire) {
            return ServerPhase::Draining;
        }
        if !self.inner.started.load(Ordering::Acquire) {
            return ServerPhase::Loading;
        }
        let loaded = self.inner.registry.all_loaded();
        if loaded.iter().any(|(_, rt)| !rt.engine.is_healthy()) {
            ServerPhase::Failed
        } else if loaded.iter().any(|(_, rt)| !rt.engine.is_ready()) {
            ServerPhase::Recovering
        } else {
            ServerPhase::Ready
        }
    }

    /// 503 unless the server takes requests: ready, or recovering from a fault (the request
    /// waits for the rebuilt worker).
    pub fn check_serving(&self) -> Result<(), ApiError> {
        match self.phase() {
            ServerPhase::Ready | ServerPhase::Recovering => Ok(()),
            ServerPhase::Loading => Err(ApiError::Unavailable(
                "the model is still loading; retry shortly".to_string(),
            )),
            ServerPhase::Draining => Err(ApiError::Unavailable(
                "the server is shutting down".to_string(),
            )),
            ServerPhase::Failed => Err(ApiError::Unavailable(
                "the inference engine failed and could not be rebuilt; the server must be restarted"
                    .to_string(),
            )),
        }
    }

    /// The model of a server that serves exactly one, when it takes requests (see
    /// [`AppState::check_serving`]); None when it serves several (the request's `model`
    /// picks one once its body is read).
    pub fn single_runtime(&self) -> Result<Option<Arc<Runtime>>, ApiError> {
        self.check_serving()?;
        if self.inner.registry.len() != 1 {
            return Ok(None);
        }
        // None when unloaded after its keep-alive: the request loads it again.
        Ok(self.inner.registry.loaded(0))
    }

    /// The model `model` names (None: the default), leased for the request: 503 unless the
    /// server takes requests, 404 `model_not_found` for a name it does not serve; an unloaded
    /// model is loaded first (the request waits, bounded by `server.models_load_timeout`).
    pub async fn lease(&self, model: Option<&str>) -> Result<Lease, ApiError> {
        self.check_serving()?;
        let i = self.inner.registry.routes().resolve(model)?;
        let lease = self.inner.registry.acquire(i).await?;
        if !lease.runtime().engine.is_healthy() {
            return Err(ApiError::Unavailable(
                "the inference engine failed and could not be rebuilt; the server must be restarted"
                    .to_string(),
            ));
        }
        Ok(lease)
    }

    /// Counts a generation request until the guard is dropped.
    pub fn begin_request(&self) -> InFlight {
        self.inner.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight {
            state: self.clone(),
            lease: None,
        }
    }

    /// Generation requests in flight (responses not yet complete).
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }
}

/// A generation request in flight; see [`AppState::begin_request`]. It holds the request's
/// lease on its model (the model stays loaded until the response's last byte).
pub struct InFlight {
    state: AppState,
    pub lease: Option<Lease>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.lease.take();
        self.state.inner.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
