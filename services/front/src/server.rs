//! Serving the front: `serve(config, listener, shutdown)` with the listener
//! injected (tests bind `127.0.0.1:0`) and shutdown as a future.

use std::future::Future;
use std::sync::Arc;

use agentvfs_proto::v1::admin_server::AdminServer;
use agentvfs_proto::v1::content_store_server::ContentStoreServer;
use agentvfs_proto::v1::file_system_server::FileSystemServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::server::NamedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::app::Front;
use crate::auth::Authenticator;
use crate::config::Config;
use crate::grep::{Grep, PageBudget};
use crate::grpc::Services;
use crate::store::{FrontId, Health, Store};
use crate::workers::Workers;

/// The front's health entry for "a worker answers" (grep and search).
pub const WORKER_HEALTH: &str = "agentvfs.v1.Worker";

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("{0}")]
    Config(String),
    #[error("closing the store: {0}")]
    Store(#[from] crate::error::Error),
}

/// Where the front serves: gRPC, and HTTP when `--http-listen` is given.
#[derive(Debug)]
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: Option<TcpListener>,
    /// Where `/metrics` is served, when it is.
    pub metrics: Option<TcpListener>,
}

/// Serves until `shutdown` resolves, then drains: health turns NOT_SERVING,
/// the listener closes, in-flight calls get `config.drain` to finish, and the
/// store is flushed.
pub async fn serve(
    config: &Config,
    store: Store,
    auth: Authenticator,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let Listeners { grpc: listener, http: http_listener, metrics } = listeners;
    // First, so that nothing recorded while starting up is lost.
    let metrics = match metrics {
        Some(listener) => Some(
            crate::metrics::recorder()
                .and_then(|recorder| agentvfs_process::metrics::serve(recorder, listener))
                .map_err(ServeError::Config)?,
        ),
        None => None,
    };
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_not_serving::<FileSystemServer<Services>>().await;
    health.set_not_serving::<AdminServer<Services>>().await;

    let limit = config.max_message_bytes;
    let sessions = crate::sessions::Sessions::new(config.session_capacity, config.session_idle);
    let workers = Arc::new(Workers::new(config.grep_concurrency, config.grep_queue));
    // Every background task is owned here and stopped before the store
    // closes: none can touch the store afterwards.
    let mut background = tokio::task::JoinSet::new();
    if let Some(metrics) = metrics {
        background.spawn(metrics);
    }
    if let Some(discovery) = crate::discovery::start(config.workers.clone(), config.worker_refresh, workers.clone()) {
        background.spawn(discovery);
    }
    // With several fronts on one database, background work runs on the one
    // holding the lease; the only front always runs it.
    let front_id: FrontId = fastrand::u128(..).to_be_bytes();
    let shared = config.database.is_some();
    let (role, roles) = watch::channel(if shared { Role::Follower } else { Role::Leader(None) });
    if shared {
        background.spawn(hold_lease(store.clone(), front_id, config.lease, role));
        background.spawn(follow_other_fronts(store.clone(), front_id));
    }
    let index_progress = Arc::new(crate::indexer::Progress::default());
    background.spawn(while_leading(roles.clone(), {
        let (store, workers, progress) = (store.clone(), workers.clone(), index_progress.clone());
        move |fence| crate::indexer::feed(store.clone(), workers.subscribe(), progress.clone(), fence)
    }));
    let grep_budget = PageBudget {
        max_files: config.grep_max_files,
        max_bytes: config.grep_max_bytes,
        max_text_bytes: config.limits.max_text_bytes,
        max_output_bytes: (config.max_message_bytes / 2) as u64,
    };
    let front = Arc::new(Front {
        store: store.clone(),
        auth: auth.clone(),
        sessions,
        workers: workers.clone(),
        grep: Arc::new(Grep::new(store.clone(), workers.clone(), grep_budget)),
        in_flight: crate::app::InFlight::new(config.lease),
        turns: crate::turns::Turns::new(!store.shared()),
        admission: crate::admission::Admission::new(config.max_in_flight, config.rate_limit),
        index_progress: index_progress.clone(),
    });
    let services = Services::new(front.clone());
    let content = ContentStoreServer::new(services.content()).max_encoding_message_size(limit);
    let services_for_admission = services.clone();
    let filesystem =
        FileSystemServer::new(services.clone()).max_decoding_message_size(limit).max_encoding_message_size(limit);
    let admin = AdminServer::new(services).max_decoding_message_size(limit).max_encoding_message_size(limit);
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(agentvfs_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(agentvfs_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    // The store is open (the caller opened it before binding): ready.
    health.set_serving::<FileSystemServer<Services>>().await;
    health.set_serving::<AdminServer<Services>>().await;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // Grep and Search need a worker: `agentvfs.v1.Worker` on the front says
    // whether one answers.
    background.spawn({
        let (health, progress) = (health.clone(), index_progress.clone());
        async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let status = if progress.any_reachable() {
                    tonic_health::ServingStatus::Serving
                } else {
                    tonic_health::ServingStatus::NotServing
                };
                health.set_service_status(WORKER_HEALTH, status).await;
            }
        }
    });
    // Apart from the other tasks: it is stopped before shutdown turns the
    // health NOT_SERVING, so that it cannot turn it back.
    let store_health = tokio::spawn(follow_store_health(store.clone(), health.clone()));
    background.spawn(crate::metrics::sample(store.clone(), workers.clone(), index_progress.clone()));
    // HTTP calls become gRPC calls to the same services through the same
    // layers, in process (see `rest`).
    let http = http_listener.map(|listener| {
        let grpc = tower::ServiceBuilder::new()
            .layer(crate::metrics::RpcMetricsLayer)
            .layer(crate::grpc::limits::CallLimitsLayer { message_bytes: limit, timeout: config.request_timeout })
            .service(tonic::service::Routes::new(filesystem.clone()).add_service(admin.clone()));
        // JSON spells bytes in base64 and escapes text: a body may be
        // larger than the message it carries, which the gRPC limit bounds.
        let options = crate::rest::Options {
            max_body: limit.saturating_mul(2),
            auth: auth.clone(),
            dev: config.dev,
            allowed_origins: config.http_allowed_origins.clone(),
            session_idle: config.session_idle,
        };
        tokio::spawn(crate::rest::serve(listener, tower::util::BoxCloneSyncService::new(grpc), options))
    });
    let server = Server::builder()
        .layer(crate::metrics::RpcMetricsLayer)
        .layer(crate::grpc::limits::CallLimitsLayer { message_bytes: limit, timeout: config.request_timeout })
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
        // Bounds what one connection can ask of the server at once; calls
        // beyond the in-flight limit are shed anyway (admission).
        .max_concurrent_streams(Some(1024))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(filesystem)
        .add_service(admin)
        .add_service(content)
        // Without TCP_NODELAY a small reply written in two parts waits for
        // the client's delayed ACK (~40 ms) before its final frame goes out.
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), async {
            let _ = stopped.await;
        });
    let server = tokio::spawn(server);
    background.spawn(while_leading(roles.clone(), {
        let (store, retention) = (store.clone(), config.receipt_retention);
        move |_| prune_receipts(store.clone(), retention)
    }));
    if shared {
        background.spawn(while_leading(roles.clone(), {
            let store = store.clone();
            move |_| prune_claims(store.clone())
        }));
    }
    background.spawn(seal_while_changing(store.clone()));
    background.spawn({
        let services = services_for_admission.clone();
        async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
            loop {
                tick.tick().await;
                services.forget_idle_rates();
            }
        }
    });

    shutdown.await;
    tracing::info!("shutting down: draining in-flight calls");
    store_health.abort();
    let _ = store_health.await;
    health.set_not_serving::<FileSystemServer<Services>>().await;
    health.set_not_serving::<AdminServer<Services>>().await;
    services_for_admission.close();
    // Aborted and awaited: each task stops at its next await. A store call
    // one had already handed to a blocking thread still runs to its end.
    background.shutdown().await;
    health.set_service_status(WORKER_HEALTH, tonic_health::ServingStatus::NotServing).await;
    let _ = stop.send(());
    match tokio::time::timeout(config.drain, server).await {
        Ok(Ok(result)) => result?,
        Ok(Err(join)) => tracing::error!(error = %join, "server task failed"),
        Err(_) => {
            tracing::warn!(deadline = ?config.drain, "drain deadline passed; closing remaining calls")
        }
    }
    // New HTTP calls were refused since admission closed; what is left
    // had the gRPC drain to finish.
    if let Some(http) = http {
        http.abort();
        let _ = http.await;
    }
    // Changes already queued on their spaces' lines run to their end.
    let lines = front.clone();
    if let Err(error) = tokio::task::spawn_blocking(move || lines.turns.close()).await {
        tracing::error!(%error, "closing the lines of changes failed");
    }
    if shared {
        // Another front takes the background work over at once.
        let _ = store.blocking(move |store| store.release_lease(&front_id)).await;
        let _ = store.blocking(move |store| store.forget_fronts(Some(&front_id))).await;
    }
    store.blocking(|store| store.close()).await?;
    tracing::info!("store flushed; stopped");
    Ok(())
}

/// Keeps the health of the front's services in step with the store's,
/// checked every second. A store that does not answer (a database that is
/// down) takes `FileSystem`, the readiness probe, out of service until it
/// answers again; a store that failed for good takes `Admin`, the liveness
/// probe, out too, so that the front is restarted.
async fn follow_store_health(store: Store, health: tonic_health::server::HealthReporter) {
    use tonic_health::ServingStatus::{NotServing, Serving};
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    // `serve` set both SERVING once the store was open.
    let mut shown = (Serving, Serving);
    loop {
        tick.tick().await;
        let now = match store.blocking(|store| Ok(store.health())).await {
            Ok(now) => now,
            Err(error) => Health::Unavailable(error.to_string()),
        };
        let statuses = match &now {
            Health::Serving => (Serving, Serving),
            Health::Unavailable(_) => (NotServing, Serving),
            Health::Failed(_) => (NotServing, NotServing),
        };
        if statuses == shown {
            continue;
        }
        match &now {
            Health::Serving => tracing::info!("the store answers again: serving"),
            Health::Unavailable(cause) => tracing::warn!(%cause, "the store does not answer: not serving files"),
            // The engine logged the failure itself, loudly.
            Health::Failed(cause) => tracing::warn!(%cause, "the store failed: not serving, asking for a restart"),
        }
        health.set_service_status(<FileSystemServer<Services> as NamedService>::NAME, statuses.0).await;
        health.set_service_status(<AdminServer<Services> as NamedService>::NAME, statuses.1).await;
        shown = statuses;
    }
}

/// Whether this front runs the background work (see `store::fronts`), and
/// the lease generation that fences it (`None`: the only front).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Leader(Option<u64>),
    Follower,
}

/// How often a front tells the others of its commits and looks at theirs.
const FRONTS_TICK: std::time::Duration = std::time::Duration::from_millis(100);

/// Takes and renews the background lease, lasting `ttl` unless renewed
/// (five times as often), and tells `role`: another front takes over within
/// about `ttl` of the holder's death.
async fn hold_lease(store: Store, front: FrontId, ttl: std::time::Duration, role: watch::Sender<Role>) {
    let mut tick = tokio::time::interval(ttl / 5);
    loop {
        tick.tick().await;
        let held = store.blocking(move |store| store.hold_lease(&front, ttl)).await;
        let now = match held {
            Ok(Some(generation)) => Role::Leader(Some(generation)),
            Ok(None) => Role::Follower,
            Err(error) => {
                tracing::warn!(%error, "cannot renew the background lease");
                Role::Follower
            }
        };
        role.send_if_modified(|role| {
            let changed = *role != now;
            if changed {
                tracing::info!(?now, "background work changes hands");
            }
            *role = now;
            changed
        });
    }
}

/// Runs the task `start` makes while this front leads, and stops it when it
/// no longer does (or leads under another generation).
async fn while_leading<F, Fut>(mut roles: watch::Receiver<Role>, mut start: F)
where
    F: FnMut(Option<u64>) -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        let role = *roles.borrow_and_update();
        match role {
            Role::Leader(fence) => {
                tokio::select! {
                    () = start(fence) => return,
                    changed = roles.changed() => if changed.is_err() { return },
                }
            }
            Role::Follower => {
                if roles.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Tells the other fronts of this front's commits, and wakes this front's
/// followers of the log (`Watch`, the index feed) when another committed.
async fn follow_other_fronts(store: Store, front: FrontId) {
    let mut tick = tokio::time::interval(FRONTS_TICK);
    let mut announced = None;
    let mut seen: std::collections::HashMap<FrontId, u64> = std::collections::HashMap::new();
    loop {
        tick.tick().await;
        let own = store.own_commits();
        if announced != Some(own) {
            match store.blocking(move |store| store.announce_commits(&front, own)).await {
                Ok(()) => announced = Some(own),
                Err(error) => tracing::debug!(%error, "cannot announce this front's commits"),
            }
        }
        let Ok(fronts) = store.blocking(|store| store.front_commits()).await else { continue };
        let mut moved = false;
        for (other, commits) in fronts {
            if other != front && seen.insert(other, commits) != Some(commits) {
                moved = true;
            }
        }
        if moved {
            store.others_committed();
        }
    }
}

/// Drops idempotency receipts older than `retention` and collects uploads
/// no commit claimed and forks never published, once an hour.
async fn prune_receipts(store: Store, retention: std::time::Duration) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(3600));
    loop {
        tick.tick().await;
        if let Err(error) = store.blocking(|store| store.forget_fronts(None)).await {
            tracing::warn!(%error, "forgetting stopped fronts failed");
        }
        let grace = crate::store::content::UPLOAD_GRACE;
        if let Err(error) = store.blocking(move |store| store.collect_uploads(grace)).await {
            tracing::warn!(%error, "collecting unclaimed uploads failed");
        }
        let grace = crate::store::FORK_GRACE;
        if let Err(error) = store.blocking(move |store| store.collect_forks(grace)).await {
            tracing::warn!(%error, "collecting unpublished forks failed");
        }
        let cutoff = crate::store::records::now_ms() - i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        match store.blocking(move |store| store.prune_receipts(cutoff)).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, "pruned idempotency receipts"),
            Err(error) => tracing::warn!(%error, "pruning idempotency receipts failed"),
        }
    }
}

/// Drops the idempotency claims and session reads that expired, every
/// [`CLAIMS_PRUNED_EVERY`]: calls that succeeded leave their claims to
/// expire (see [`crate::grpc::idempotency`]).
async fn prune_claims(store: Store) {
    let mut tick = tokio::time::interval(CLAIMS_PRUNED_EVERY);
    loop {
        tick.tick().await;
        let now = crate::store::records::now_ms();
        let pruned = store.blocking(move |store| Ok((store.prune_claims(now)?, store.prune_session_reads(now)?))).await;
        if let Err(error) = pruned {
            tracing::warn!(%error, "pruning expired idempotency claims and session reads failed");
        }
    }
}

/// How often expired idempotency claims are pruned on a shared store.
const CLAIMS_PRUNED_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Seals the store once a second while changes arrive, so that damage to
/// its files is found at the next start (see [`crate::store::seal`]).
async fn seal_while_changing(store: Store) {
    let mut commits = store.subscribe();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        if !commits.has_changed().unwrap_or(false) {
            continue;
        }
        commits.mark_unchanged();
        if let Err(error) = store.blocking(|store| store.seal()).await {
            tracing::warn!(%error, "sealing the store failed");
        }
    }
}
