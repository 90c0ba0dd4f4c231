//! The models a server serves, and their life: each is unloaded, loading, loaded or failed.
//! One engine (its own workers and KV cache, weights mapped from its file) per loaded model.
//!
//! - A request takes a [`Lease`] on its model ([`ModelRegistry::acquire`]): a loaded model is
//!   leased at once; an unloaded one is loaded off the runtime (`spawn_blocking`) and the
//!   request waits, at most `server.models_load_timeout`, then a 503 with `Retry-After`; a
//!   model whose load failed is a 503 naming why (the others keep serving).
//! - With `server.models_memory_budget`, a load that does not fit first unloads the least
//!   recently used models without a lease ([`plan`]); while only leased models stand in the
//!   way it waits like a load. Requests in flight are never cut.
//! - A model without a lease for `server.models_keep_alive` is unloaded ([`ModelRegistry::sweep`]).
//!
//! The slots live behind one mutex, held for bookkeeping only (never across a load or an
//! engine shutdown); every change bumps a `watch` counter that waiting requests listen to.

pub mod plan;
pub mod routes;

use crate::config::{Config, ModelSpec};
use crate::metrics::window::StatsWindow;
use crate::metrics::{BuildInfo, Metrics, MetricsError};
use crate::scheduler::fault::FaultInjection;
use crate::scheduler::observer::{Fanout, Observer};
use crate::scheduler::setup;
use crate::server::error::ApiError;
use crate::server::runtime::Runtime;
use plan::{Fit, Resident};
use routes::{Routes, UnknownNames};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Why the registry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read server.models_dir {path}")]
    ModelsDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no model to serve: configure [model], [[models]] or a server.models_dir holding .gguf files")]
    NoModels,
    #[error(transparent)]
    DefaultModel(#[from] routes::UnknownDefault),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

/// One served model: what it is and its metrics (kept across unloads and reloads).
pub struct PoolModel {
    pub spec: ModelSpec,
    pub metrics: Arc<Metrics>,
    pub stats: Arc<StatsWindow>,
    /// Loaded when the server starts (configured models); else on first use (`models_dir`).
    pub eager: bool,
    /// The memory estimate, once computed.
    estimate: Mutex<Option<u64>>,
}

/// Where a model is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Unloaded,
    Loading,
    Loaded,
    /// Its load failed, for this reason (until `POST /models/load` tries again).
    Failed(String),
}

impl Status {
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Unloaded => "unloaded",
            Status::Loading => "loading",
            Status::Loaded => "loaded",
            Status::Failed(_) => "failed",
        }
    }
}

enum State {
    Unloaded,
    /// `bytes`: the estimate, held against the budget while it loads.
    Loading {
        bytes: u64,
    },
    Loaded {
        rt: Arc<Runtime>,
        bytes: u64,
    },
    Failed(String),
}

struct Slot {
    state: State,
    /// Leases held.
    leases: usize,
    last_used: Instant,
}

/// The budget settings (from `[server]`).
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    pub budget: Option<u64>,
    pub keep_alive: Option<Duration>,
    pub load_timeout: Duration,
}

pub struct ModelRegistry {
    models: Vec<PoolModel>,
    routes: Routes,
    settings: PoolSettings,
    /// The configuration each model's engine settings are laid over.
    base: Config,
    faults: Vec<FaultInjection>,
    slots: Mutex<Vec<Slot>>,
    changed: watch::Sender<u64>,
}

/// A request's hold on a loaded model: the model is not unloaded while any is held.
pub struct Lease {
    registry: Arc<ModelRegistry>,
    index: usize,
    rt: Arc<Runtime>,
}

impl Lease {
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    pub fn index(&self) -> usize {
        self.index
    }

    /// The model's id (what replies carry).
    pub fn id(&self) -> &str {
        self.registry.routes.id(self.index)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let idle = {
            let mut slots = self.registry.lock();
            let s = &mut slots[self.index];
            s.leases = s.leases.saturating_sub(1);
            s.last_used = Instant::now();
            s.leases == 0
        };
        if idle {
            self.registry.bump();
        }
    }
}

tokio::task_local! {
    /// The model the HTTP request being handled was routed to.
    static ROUTED: std::cell::Cell<Option<usize>>;
}

/// Runs `f` (the handling of one HTTP request) and returns, with its output, the model the
/// request was routed to (None: it named none that is served, or the route takes none).
pub async fn track_routing<F: std::future::Future>(f: F) -> (F::Output, Option<usize>) {
    ROUTED
        .scope(std::cell::Cell::new(None), async move {
            let out = f.await;
            (out, ROUTED.with(|c| c.get()))
        })
        .await
}

/// The `*.gguf` files of `dir`, sorted by name.
fn scan_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    files.sort();
    Ok(files)
}

impl ModelRegistry {
    /// The configured models, then the files of `server.models_dir` (a file whose stem is
    /// already an id is left out, with a warning). Nothing is loaded yet.
    pub fn new(
        cfg: &Config,
        faults: Vec<FaultInjection>,
    ) -> Result<Arc<ModelRegistry>, RegistryError> {
        let mut specs: Vec<(ModelSpec, bool)> =
            cfg.models.iter().map(|s| (s.clone(), true)).collect();
        if let Some(dir) = &cfg.server.models_dir {
            let files = scan_dir(dir).map_err(|source| RegistryError::ModelsDir {
                path: dir.clone(),
                source,
            })?;
            for path in files {
                let spec = ModelSpec {
                    path,
                    name: None,
                    aliases: Vec::new(),
                    chat_template: None,
                    pooling: None,
                    threads: cfg.threads,
                    workers: cfg.workers,
                    kv_cache: cfg.kv_cache,
                    kv_type: cfg.kv_type,
                    draft: None,
                };
                let id = spec.id();
                if specs.iter().any(|(s, _)| s.ids().contains(&id)) {
                    tracing::warn!(file = %spec.path.display(), id, "server.models_dir: a model with this id is configured already; the file is left out");
                    continue;
                }
                specs.push((spec, false));
            }
        }
        if specs.is_empty() {
            return Err(RegistryError::NoModels);
        }
        let routes = Routes::new(specs.iter().map(|(s, _)| s.ids()).collect()).with_policy(
            &UnknownNames {
                default_model: cfg.server.default_model.clone(),
                strict: cfg.server.strict_model_names,
            },
        )?;
        let mut models = Vec::with_capacity(specs.len());
        for (i, (spec, eager)) in specs.into_iter().enumerate() {
            // The process metrics once, with the default model's label.
            let metrics = if i == 0 {
                Metrics::new(routes.id(i))?
            } else {
                Metrics::without_process(routes.id(i))?
            };
            models.push(PoolModel {
                spec,
                metrics: Arc::new(metrics),
                stats: Arc::new(StatsWindow::new()),
                eager,
                estimate: Mutex::new(None),
            });
        }
        let now = Instant::now();
        let slots = models
            .iter()
            .map(|_| Slot {
                state: State::Unloaded,
                leases: 0,
                last_used: now,
            })
            .collect();
        Ok(Arc::new(ModelRegistry {
            models,
            routes,
            settings: PoolSettings {
                budget: cfg.server.models_memory_budget,
                keep_alive: cfg.server.models_keep_alive,
                load_timeout: cfg.server.models_load_timeout,
            },
            base: cfg.clone(),
            faults,
            slots: Mutex::new(slots),
            changed: watch::Sender::new(0),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every request waiting for a change.
    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    pub fn len(&self) -> usize {
        self.models.len()
    }

    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    pub fn model(&self, i: usize) -> &PoolModel {
        &self.models[i]
    }

    pub fn models(&self) -> &[PoolModel] {
        &self.models
    }

    pub fn status(&self, i: usize) -> Status {
        match &self.lock()[i].state {
            State::Unloaded => Status::Unloaded,
            State::Loading { .. } => Status::Loading,
            State::Loaded { .. } => Status::Loaded,
            State::Failed(e) => Status::Failed(e.clone()),
        }
    }

    /// Model `i`'s engine when it is loaded.
    pub fn loaded(&self, i: usize) -> Option<Arc<Runtime>> {
        match &self.lock()[i].state {
            State::Loaded { rt, .. } => Some(Arc::clone(rt)),
            _ => None,
        }
    }

    /// Every loaded model, with its index.
    pub fn all_loaded(&self) -> Vec<(usize, Arc<Runtime>)> {
        self.lock()
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match &s.state {
                State::Loaded { rt, .. } => Some((i, Arc::clone(rt))),
                _ => None,
            })
            .collect()
    }

    /// Leases held on model `i` (its requests in flight).
    pub fn leases(&self, i: usize) -> usize {
        self.lock()[i].leases
    }

    /// Weights and KV bytes of the loaded (and loading) models.
    pub fn memory_used(&self) -> u64 {
        self.lock()
            .iter()
            .map(|s| match s.state {
                State::Loading { bytes } | State::Loaded { bytes, .. } => bytes,
                _ => 0,
            })
            .sum()
    }

    pub fn settings(&self) -> &PoolSettings {
        &self.settings
    }

    /// A lease on model `i`, loading it first if need be (waiting at most the load timeout).
    pub async fn acquire(self: &Arc<Self>, i: usize) -> Result<Lease, ApiError> {
        let deadline = tokio::time::Instant::now() + self.settings.load_timeout;
        self.acquire_until(i, Some(deadline)).await
    }

    /// Loads model `i` and waits for it without a time limit (start-up); the load error if it
    /// fails.
    pub async fn preload(self: &Arc<Self>, i: usize) -> Result<(), String> {
        match self.acquire_until(i, None).await {
            Ok(_) => Ok(()),
            Err(ApiError::ModelUnavailable { reason, .. }) => Err(reason),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Loads model `i` (again, if its last load failed) and waits for it, bounded by the load
    /// timeout (`POST /models/load`).
    pub async fn load(self: &Arc<Self>, i: usize) -> Result<(), ApiError> {
        {
            let mut slots = self.lock();
            if matches!(slots[i].state, State::Failed(_)) {
                slots[i].state = State::Unloaded;
            }
        }
        self.acquire(i).await.map(drop)
    }

    async fn acquire_until(
        self: &Arc<Self>,
        i: usize,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Lease, ApiError> {
        let _ = ROUTED.try_with(|c| c.set(Some(i)));
        let id = self.routes.id(i).to_string();
        let mut rx = self.changed.subscribe();
        let mut need = None;
        loop {
            match self.step(i, need)? {
                Step::Leased(rt) => {
                    return Ok(Lease {
                        registry: Arc::clone(self),
                        index: i,
                        rt,
                    })
                }
                Step::Estimate => {
                    // Read from the file, off the runtime and outside the lock.
                    let registry = Arc::clone(self);
                    let est = tokio::task::spawn_blocking(move || registry.estimate(i))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r);
                    match est {
                        Ok(b) => need = Some(b),
                        Err(reason) => {
                            self.fail(i, reason.clone());
                            return Err(ApiError::ModelUnavailable { model: id, reason });
                        }
                    }
                    continue;
                }
                Step::Wait => {}
            }
            let changed = rx.changed();
            match deadline {
                None => {
                    let _ = changed.await;
                }
                Some(d) => {
                    if tokio::time::timeout_at(d, changed).await.is_err() {
                        return Err(ApiError::ModelLoading {
                            model: id,
                            retry_after: Duration::from_secs(5),
                        });
                    }
                }
            }
        }
    }

    /// One look at model `i` under the lock: lease it, or start its load (unloading what the
    /// budget says), or wait. With a budget, a load needs the model's estimate (`need`) first.
    fn step(self: &Arc<Self>, i: usize, need: Option<u64>) -> Result<Step, ApiError> {
        let mut slots = self.lock();
        match &slots[i].state {
            State::Loaded { rt, .. } => {
                let rt = Arc::clone(rt);
                let s = &mut slots[i];
                s.leases += 1;
                s.last_used = Instant::now();
                return Ok(Step::Leased(rt));
            }
            State::Failed(reason) => {
                return Err(ApiError::ModelUnavailable {
                    model: self.routes.id(i).to_string(),
                    reason: reason.clone(),
                })
            }
            State::Loading { .. } => return Ok(Step::Wait),
            State::Unloaded => {}
        }
        let need = match (self.settings.budget, need) {
            (None, _) => 0,
            (Some(_), Some(n)) => n,
            (Some(_), None) => return Ok(Step::Estimate),
        };
        let resident = residents(&slots);
        let evict = match plan::plan_load(self.settings.budget, need, &resident) {
            Fit::Fits => Vec::new(),
            Fit::Evict(list) => list,
            Fit::Wait => return Ok(Step::Wait),
            Fit::Never => {
                let reason = format!(
                    "it needs about {} MiB (weights and KV cache), more than \
                     server.models_memory_budget ({} MiB)",
                    need >> 20,
                    self.settings.budget.unwrap_or(0) >> 20
                );
                return Err(ApiError::ModelUnavailable {
                    model: self.routes.id(i).to_string(),
                    reason,
                });
            }
        };
        let mut unloaded = Vec::with_capacity(evict.len());
        for j in evict {
            if let State::Loaded { rt, .. } =
                std::mem::replace(&mut slots[j].state, State::Unloaded)
            {
                tracing::info!(
                    model = self.routes.id(j),
                    to_load = self.routes.id(i),
                    "unloading the least recently used idle model to fit the memory budget"
                );
                unloaded.push(rt);
            }
        }
        slots[i].state = State::Loading { bytes: need };
        drop(slots);
        self.bump();
        let registry = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            for rt in unloaded {
                rt.engine.shutdown();
            }
            let result = registry.build(i);
            registry.finish_load(i, result);
        });
        Ok(Step::Wait)
    }

    /// Weights plus KV bytes model `i` will take (read from its file; cached).
    fn estimate(&self, i: usize) -> Result<u64, String> {
        let m = &self.models[i];
        if let Some(b) = *m.estimate.lock().unwrap_or_else(PoisonError::into_inner) {
            return Ok(b);
        }
        let b = setup::memory_estimate(&self.base.for_model(&m.spec)).map_err(|e| e.to_string())?;
        *m.estimate.lock().unwrap_or_else(PoisonError::into_inner) = Some(b);
        Ok(b)
    }

    fn fail(&self, i: usize, reason: String) {
        tracing::error!(model = self.routes.id(i), error = %reason, "the model failed to load");
        self.lock()[i].state = State::Failed(reason);
        self.bump();
    }

    /// Loads model `i` (blocking): its engine, chat template and metrics.
    fn build(&self, i: usize) -> Result<(Runtime, u64), String> {
        let m = &self.models[i];
        let cfg = self.base.for_model(&m.spec);
        let observer: Arc<dyn Observer> = Arc::new(Fanout(vec![
            Arc::clone(&m.metrics) as Arc<dyn Observer>,
            Arc::clone(&m.stats) as Arc<dyn Observer>,
        ]));
        let loaded =
            setup::start_with(&cfg, None, observer, &self.faults).map_err(|e| e.to_string())?;
        let (load_time, quant) = (loaded.load_time, loaded.quant.clone());
        let file_bytes = std::fs::metadata(&m.spec.path)
            .map(|md| md.len())
            .unwrap_or(0);
        let kv_bytes = loaded.kv_bytes;
        let rt =
            Runtime::new(loaded, m.spec.chat_template.as_deref()).map_err(|e| e.to_string())?;
        let info = rt.engine.info();
        m.metrics.set_model_load_seconds(load_time.as_secs_f64());
        m.metrics.set_build_info(&BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            isa: crate::kernels::isa::isa().name().to_string(),
            threads: info.threads_per_worker,
            workers: info.workers,
            model: self.routes.id(i).to_string(),
            quant,
        });
        tracing::info!(
            model = self.routes.id(i),
            isa = crate::kernels::isa::isa().name(),
            workers = info.workers,
            threads_per_worker = info.threads_per_worker,
            load_seconds = load_time.as_secs_f64(),
            template = ?rt.template_source,
            fingerprint = %rt.fingerprint,
            n_ctx = info.n_ctx,
            kv_positions = info.kv_positions_per_worker * info.workers,
            memory_mib = (file_bytes + kv_bytes) >> 20,
            "model loaded; ready"
        );
        Ok((rt, file_bytes + kv_bytes))
    }

    fn finish_load(&self, i: usize, result: Result<(Runtime, u64), String>) {
        match result {
            Ok((rt, bytes)) => {
                let mut slots = self.lock();
                slots[i].state = State::Loaded {
                    rt: Arc::new(rt),
                    bytes,
                };
                slots[i].last_used = Instant::now();
                drop(slots);
                self.bump();
            }
            Err(reason) => self.fail(i, reason),
        }
    }

    /// Unloads model `i` now and waits until its engine is stopped and its memory freed
    /// (`POST /models/unload`); Ok(false) when it was not loaded. A model with requests in
    /// flight, or loading, is a 409.
    pub async fn unload(self: &Arc<Self>, i: usize) -> Result<bool, ApiError> {
        let rt = {
            let mut slots = self.lock();
            let s = &mut slots[i];
            match &s.state {
                State::Loaded { .. } if s.leases == 0 => {
                    match std::mem::replace(&mut s.state, State::Unloaded) {
                        State::Loaded { rt, .. } => rt,
                        _ => unreachable!("matched Loaded above"),
                    }
                }
                State::Loaded { .. } | State::Loading { .. } => {
                    return Err(ApiError::ModelBusy {
                        model: self.routes.id(i).to_string(),
                    })
                }
                State::Failed(_) => {
                    s.state = State::Unloaded;
                    return Ok(false);
                }
                State::Unloaded => return Ok(false),
            }
        };
        tracing::info!(
            model = self.routes.id(i),
            "unloading the model (POST /models/unload)"
        );
        let _ = tokio::task::spawn_blocking(move || rt.engine.shutdown()).await;
        self.bump();
        Ok(true)
    }

    /// Unloads the models idle past the keep-alive, forever (spawned when one is set).
    pub async fn sweep(self: Arc<Self>) {
        let Some(keep) = self.settings.keep_alive else {
            return;
        };
        let tick = (keep / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            let expired: Vec<(usize, Arc<Runtime>)> = {
                let mut slots = self.lock();
                let due = plan::idle_expired(Some(keep), Instant::now(), &residents(&slots));
                due.into_iter()
                    .filter_map(
                        |j| match std::mem::replace(&mut slots[j].state, State::Unloaded) {
                            State::Loaded { rt, .. } => Some((j, rt)),
                            other => {
                                slots[j].state = other;
                                None
                            }
                        },
                    )
                    .collect()
            };
            if expired.is_empty() {
                continue;
            }
            for (j, _) in &expired {
                tracing::info!(model = self.routes.id(*j), keep_alive = ?keep, "unloading an idle model");
            }
            let _ = tokio::task::spawn_blocking(move || {
                for (_, rt) in expired {
                    rt.engine.shutdown();
                }
            })
            .await;
            self.bump();
        }
    }

    /// Stops every engine (the end of `kiln serve`), blocking until their threads end.
    pub fn shutdown_all(&self) {
        for (_, rt) in self.all_loaded() {
            rt.engine.shutdown();
        }
    }
}

enum Step {
    Leased(Arc<Runtime>),
    /// The model's memory estimate is needed to plan its load.
    Estimate,
    Wait,
}

/// The models holding memory, as the planner sees them.
fn residents(slots: &[Slot]) -> Vec<Resident> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(index, s)| match s.state {
            State::Loaded { bytes, .. } => Some(Resident {
                index,
                bytes,
                busy: s.leases > 0,
                last_used: s.last_used,
            }),
            State::Loading { bytes } => Some(Resident {
                index,
                bytes,
                busy: true,
                last_used: s.last_used,
            }),
            _ => None,
        })
        .collect()
}
