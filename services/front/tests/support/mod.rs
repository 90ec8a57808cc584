//! Runs the real `agentvfs-front` binary on a loopback port with a temporary
//! store, and hands out generated clients.
//!
//! A front's store is a temporary sled directory, or, in a test run with
//! [`Engine::Database`] (see [`on_both_engines!`]), a fresh database of the
//! test process's throwaway PostgreSQL cluster.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

#[path = "binaries.rs"]
mod binaries;
pub mod http;

/// The storage engine of the fronts a test starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// sled in a temporary directory (the default).
    Embedded,
    /// A fresh database of the test process's PostgreSQL cluster.
    Database,
}

tokio::task_local! {
    static ENGINE: Engine;
}

impl Engine {
    /// Runs `test`, whose fronts keep their stores on this engine.
    pub async fn scope<F: Future>(self, test: F) -> F::Output {
        ENGINE.scope(self, test).await
    }

    /// The engine of the running test.
    pub fn current() -> Engine {
        ENGINE.try_with(|engine| *engine).unwrap_or(Engine::Embedded)
    }
}

/// Runs each async test once per storage engine, as `embedded::NAME` and
/// `database::NAME`: one suite, both engines.
#[macro_export]
macro_rules! on_both_engines {
    ($( $(#[$attr:meta])* async fn $name:ident() $body:block )*) => {
        $( async fn $name() $body )*
        mod embedded {
            $( $(#[$attr])* async fn $name() { $crate::support::Engine::Embedded.scope(super::$name()).await } )*
        }
        mod database {
            $( $(#[$attr])* async fn $name() { $crate::support::Engine::Database.scope(super::$name()).await } )*
        }
    };
}

/// The flags that put a front's store at `data_dir`: the directory itself,
/// or the database that stands for it. A directory keeps its database for
/// the whole test process, so a front restarted on it finds its store.
fn store_args(data_dir: &Path) -> Vec<String> {
    static DATABASES: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let mut databases = DATABASES.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner);
    let database = match databases.get(data_dir) {
        Some(url) => Some(url.clone()),
        None if Engine::current() == Engine::Database => {
            let url = agentvfs_testdb::Cluster::shared().create_database();
            databases.insert(data_dir.to_owned(), url.clone());
            Some(url)
        }
        None => None,
    };
    match database {
        Some(url) => vec!["--database-url".into(), url],
        None => vec!["--data-dir".into(), data_dir.display().to_string()],
    }
}

/// The `agentvfs-worker` binary beside this package's front.
pub fn worker_binary() -> PathBuf {
    binaries::workspace_binaries(env!("CARGO_BIN_EXE_agentvfs-front")).join("agentvfs-worker")
}

/// The front and the worker with their fault points, armed by `FAILPOINTS`:
/// the binaries every test uses (see `binaries.rs`).
pub fn failpoint_binaries() -> (PathBuf, PathBuf) {
    (PathBuf::from(env!("CARGO_BIN_EXE_agentvfs-front")), worker_binary())
}

/// A running worker process; killed on drop.
pub struct Worker {
    child: Child,
    pub addr: String,
    announced: Announced,
    front: String,
    index_dir: PathBuf,
    binary: PathBuf,
}

impl Worker {
    /// Starts a worker that fetches content from `front`, on `listen`.
    pub async fn start(front: &str, listen: &str, index_dir: &Path) -> Worker {
        Self::start_binary(&worker_binary(), front, listen, index_dir, &[]).await
    }

    /// Starts `binary` as a worker, with extra environment variables.
    pub async fn start_binary(
        binary: &Path,
        front: &str,
        listen: &str,
        index_dir: &Path,
        env: &[(&str, &str)],
    ) -> Worker {
        let mut child = Command::new(binary)
            .args(["--listen", listen, "--front", front, "--index-dir"])
            .arg(index_dir)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn agentvfs-worker");
        let announced = Announced::follow(child.stderr.take().expect("stderr"));
        let addr = listening(&mut child).await.expect("the worker exited before it listened");
        Worker {
            child,
            addr,
            announced,
            front: front.to_owned(),
            index_dir: index_dir.to_owned(),
            binary: binary.to_owned(),
        }
    }

    /// Where it serves `/metrics` (started with `AGENTVFS_METRICS_LISTEN`).
    pub fn metrics(&self) -> String {
        self.announced.address("metrics")
    }

    /// Starts it again on the same address with extra environment variables.
    pub async fn restart_with(&mut self, env: &[(&str, &str)]) {
        self.kill();
        *self = Worker::start_binary(
            &self.binary.clone(),
            &self.front.clone(),
            &self.addr.clone(),
            &self.index_dir.clone(),
            env,
        )
        .await;
    }

    /// True once the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where its index lives.
    pub fn index_dir(&self) -> &Path {
        &self.index_dir
    }

    /// SIGKILLs the worker.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same address.
    pub async fn restart(&mut self) {
        self.restart_with(&[]).await;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The Prometheus text `/metrics` at `address` serves, once it answers.
pub fn scrape(address: &str) -> String {
    use std::io::{Read as _, Write as _};
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(address) {
            stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
            let mut body = String::new();
            stream.read_to_string(&mut body).unwrap();
            return body;
        }
        assert!(Instant::now() < deadline, "metrics endpoint never answered");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of the first sample line that contains every fragment.
pub fn sample(body: &str, fragments: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| fragments.iter().all(|f| l.contains(f)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// How many ports [`with_front_port`] tries.
const PORT_ATTEMPTS: usize = 5;

/// Starts what must be told a front's address before the front listens
/// (its workers, which fetch content from it), then the front: `start`
/// gets an address picked in advance and returns `None` when the front
/// exited before it listened, because another process bound that port
/// first. Then everything starts again on another port.
pub async fn with_front_port<T>(mut start: impl AsyncFnMut(&str) -> Option<T>) -> T {
    for _ in 0..PORT_ATTEMPTS {
        if let Some(started) = start(&format!("127.0.0.1:{}", free_port())).await {
            return started;
        }
    }
    panic!("the front exited before it listened, {PORT_ATTEMPTS} times");
}

/// A free loopback port (bound, then released): for the address a front's
/// workers must be told before it starts (see [`with_front_port`]);
/// anything else listens on port 0.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A front and a worker that know each other.
pub struct Stack {
    pub front: Front,
    pub worker: Worker,
}

impl Stack {
    pub async fn start(front_args: &[&str]) -> Stack {
        let front = PathBuf::from(env!("CARGO_BIN_EXE_agentvfs-front"));
        Self::start_binaries(&front, &worker_binary(), front_args).await
    }

    /// A stack with extra front flags and environment variables for each
    /// process.
    pub async fn start_configured(
        front_args: &[&str],
        front_env: &[(&str, &str)],
        worker_env: &[(&str, &str)],
    ) -> Stack {
        let front = PathBuf::from(env!("CARGO_BIN_EXE_agentvfs-front"));
        Self::start_with(&front, &worker_binary(), front_args, front_env, worker_env).await
    }

    /// A stack of the given front and worker binaries.
    pub async fn start_binaries(front_binary: &Path, worker_binary: &Path, front_args: &[&str]) -> Stack {
        Self::start_with(front_binary, worker_binary, front_args, &[], &[]).await
    }

    async fn start_with(
        front_binary: &Path,
        worker_binary: &Path,
        front_args: &[&str],
        front_env: &[(&str, &str)],
        worker_env: &[(&str, &str)],
    ) -> Stack {
        let temp = tempfile::tempdir().expect("temp dir");
        let (index, data_dir) = (temp.path().join("index"), temp.path().join("data"));
        let (mut front, worker) = with_front_port(async |front_addr| {
            let worker = Worker::start_binary(worker_binary, front_addr, "127.0.0.1:0", &index, worker_env).await;
            let mut args = vec!["--worker", worker.addr.as_str()];
            args.extend_from_slice(front_args);
            let extra_args = args.iter().map(|s| s.to_string()).collect();
            let front = Front::try_spawn_binary(front_binary, &data_dir, front_addr, extra_args, front_env).await?;
            Some((front, worker))
        })
        .await;
        front._temp = Some(temp);
        Stack { front, worker }
    }
}

/// The addresses a process logs for its listeners besides the gRPC one
/// (`metrics listening on ADDR`, `HTTP listening on ADDR`, on stderr), read
/// by a thread of their own; the rest of its log is dropped.
#[derive(Debug, Clone, Default)]
struct Announced(Arc<Mutex<HashMap<String, String>>>);

impl Announced {
    fn follow(stderr: ChildStderr) -> Announced {
        let announced = Announced::default();
        let found = announced.0.clone();
        // Ends with the process, which closes the pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let Some((before, after)) = line.split_once(" listening on ") else { continue };
                // Plain or JSON logs: the word before, the token after.
                let service = before.rsplit([' ', '"']).next().unwrap_or_default();
                let address = after.split([' ', '"']).next().unwrap_or_default();
                found.lock().unwrap().insert(service.to_owned(), address.to_owned());
            }
        });
        announced
    }

    /// The address `service` listens on, once the process has said it.
    fn address(&self, service: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(address) = self.0.lock().unwrap().get(service) {
                return address.clone();
            }
            assert!(Instant::now() < deadline, "the process never said where {service} listens");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The address a server prints once it listens (`listening on ADDR`, its
/// only line on stdout); `None` when it exits first.
async fn listening(child: &mut Child) -> Option<String> {
    let stdout = child.stdout.take().expect("stdout");
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        if BufReader::new(stdout).read_line(&mut line).expect("read stdout") == 0 {
            return None;
        }
        let addr = line.trim().strip_prefix("listening on ");
        Some(addr.unwrap_or_else(|| panic!("unexpected first line {line:?}")).to_owned())
    })
    .await
    .expect("join")
}

/// A front serving HTTP too, with `args`: the front, its HTTP address and
/// its directory.
pub async fn front_with_http(args: &[&str]) -> (Front, String, tempfile::TempDir) {
    let temp = tempfile::tempdir().unwrap();
    let mut all = vec!["--http-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let front = Front::start_at_with("127.0.0.1:0", temp.path(), &all).await;
    let http = front.http();
    (front, http, temp)
}

/// A running front process; killed on drop.
pub struct Front {
    child: Child,
    pub addr: String,
    announced: Announced,
    pub data_dir: PathBuf,
    extra_args: Vec<String>,
    binary: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Front {
    /// Starts a dev-mode front on a fresh temporary store.
    pub async fn start() -> Front {
        Self::start_with(&[]).await
    }

    pub async fn start_with(args: &[&str]) -> Front {
        let temp = tempfile::tempdir().expect("temp dir");
        let data_dir = temp.path().join("data");
        let mut front = Self::spawn(&data_dir, args.iter().map(|s| s.to_string()).collect()).await;
        front._temp = Some(temp);
        front
    }

    /// Starts `binary` as a dev-mode front on a fresh temporary store, with
    /// extra flags and environment variables.
    pub async fn start_binary(binary: &Path, args: &[&str], env: &[(&str, &str)]) -> Front {
        Self::start_binary_at(binary, "127.0.0.1:0", args, env).await
    }

    /// Starts `binary` as a dev-mode front on `listen` with a fresh
    /// temporary store, with extra flags and environment variables.
    pub async fn start_binary_at(binary: &Path, listen: &str, args: &[&str], env: &[(&str, &str)]) -> Front {
        let front = Self::try_start_binary_at(binary, listen, args, env).await;
        front.unwrap_or_else(|| panic!("the front exited before it listened on {listen}"))
    }

    /// [`Front::start_binary_at`]; `None` when the front exits before it
    /// listens (see [`with_front_port`]).
    pub async fn try_start_binary_at(
        binary: &Path,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Option<Front> {
        let temp = tempfile::tempdir().expect("temp dir");
        let data_dir = temp.path().join("data");
        let args = args.iter().map(|s| s.to_string()).collect();
        let mut front = Self::try_spawn_binary(binary, &data_dir, listen, args, env).await?;
        front._temp = Some(temp);
        Some(front)
    }

    /// Starts a dev-mode front on `listen` with its store in `dir`.
    pub async fn start_at_with(listen: &str, dir: &Path, args: &[&str]) -> Front {
        Self::spawn_at(&dir.join("data"), listen, args.iter().map(|s| s.to_string()).collect()).await
    }

    /// [`Front::start_at_with`]; `None` when the front exits before it
    /// listens (see [`with_front_port`]).
    pub async fn try_start_at_with(listen: &str, dir: &Path, args: &[&str]) -> Option<Front> {
        let binary = PathBuf::from(env!("CARGO_BIN_EXE_agentvfs-front"));
        let args = args.iter().map(|s| s.to_string()).collect();
        Self::try_spawn_binary(&binary, &dir.join("data"), listen, args, &[]).await
    }

    async fn spawn(data_dir: &Path, extra_args: Vec<String>) -> Front {
        Self::spawn_at(data_dir, "127.0.0.1:0", extra_args).await
    }

    async fn spawn_at(data_dir: &Path, listen: &str, extra_args: Vec<String>) -> Front {
        let binary = PathBuf::from(env!("CARGO_BIN_EXE_agentvfs-front"));
        Self::spawn_binary(&binary, data_dir, listen, extra_args, &[]).await
    }

    async fn spawn_binary(
        binary: &Path,
        data_dir: &Path,
        listen: &str,
        extra_args: Vec<String>,
        env: &[(&str, &str)],
    ) -> Front {
        let front = Self::try_spawn_binary(binary, data_dir, listen, extra_args, env).await;
        front.unwrap_or_else(|| panic!("the front exited before it listened on {listen}"))
    }

    /// Starts a front; `None` when it exits before it listens (its port
    /// was taken, say).
    async fn try_spawn_binary(
        binary: &Path,
        data_dir: &Path,
        listen: &str,
        extra_args: Vec<String>,
        env: &[(&str, &str)],
    ) -> Option<Front> {
        let mut command = Command::new(binary);
        command
            .args(["--listen", listen])
            .args(store_args(data_dir))
            .args(&extra_args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if !extra_args.iter().any(|a| a == "--tokens") {
            command.arg("--dev");
        }
        // Tests drive calls faster than a production rate limit allows.
        if !extra_args.iter().any(|a| a == "--rate-limit") {
            command.args(["--rate-limit", "0"]);
        }
        let mut child = command.spawn().expect("spawn agentvfs-front");
        let announced = Announced::follow(child.stderr.take().expect("stderr"));
        let addr = listening(&mut child).await?;
        let front = Front {
            child,
            addr,
            announced,
            data_dir: data_dir.to_owned(),
            extra_args,
            binary: binary.to_owned(),
            _temp: None,
        };
        front.wait_serving().await;
        Some(front)
    }

    /// Polls health until the front serves (never sleeps and hopes).
    async fn wait_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(channel) = Channel::from_shared(format!("http://{}", self.addr)).unwrap().connect().await {
                let status = HealthClient::new(channel)
                    .check(tonic_health::pb::HealthCheckRequest { service: "agentvfs.v1.FileSystem".into() })
                    .await;
                if status.is_ok_and(|s| s.into_inner().status == ServingStatus::Serving as i32) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "front did not become healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Where it serves `/metrics` (started with `--metrics-listen`).
    pub fn metrics(&self) -> String {
        self.announced.address("metrics")
    }

    /// Where it serves HTTP (started with `--http-listen`).
    pub fn http(&self) -> String {
        self.announced.address("HTTP")
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr)).unwrap().connect().await.expect("connect")
    }

    pub async fn fs(&self) -> FileSystemClient<Channel> {
        FileSystemClient::new(self.channel().await)
    }

    pub async fn admin(&self) -> AdminClient<Channel> {
        AdminClient::new(self.channel().await)
    }

    /// SIGKILLs the process (no drain, no final flush) and starts a new one
    /// on the same store and address.
    pub async fn crash_and_restart(&mut self) {
        self.crash_and_restart_with(&[]).await;
    }

    /// SIGKILLs the process (if it still runs) and starts a new one on the
    /// same store and address, with extra environment variables.
    pub async fn crash_and_restart_with(&mut self, env: &[(&str, &str)]) {
        let _ = self.child.kill();
        self.child.wait().expect("wait");
        let next = Self::spawn_binary(&self.binary, &self.data_dir, &self.addr, self.extra_args.clone(), env).await;
        let temp = self._temp.take();
        *self = next;
        self._temp = temp;
    }

    /// True once the process has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit status, keeping this runtime
    /// free to answer the server's GOAWAY on open connections.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().expect("kill -TERM");
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A new space named `name`; returns its ID.
    pub async fn space(&self, name: &str) -> String {
        self.admin()
            .await
            .create_space(pb::CreateSpaceRequest { name: name.into(), ..Default::default() })
            .await
            .expect("create space")
            .into_inner()
            .id
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reason, code and metadata of an error status.
pub fn reason(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    status.get_details_error_info().map(|info| info.reason).unwrap_or_default()
}

pub fn metadata(status: &tonic::Status, key: &str) -> String {
    use tonic_types::StatusExt;
    status.get_details_error_info().and_then(|info| info.metadata.get(key).cloned()).unwrap_or_default()
}

/// Asserts the code and reason, and that the error info is well formed.
#[track_caller]
pub fn assert_error(status: &tonic::Status, code: tonic::Code, reason_: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(reason(status), reason_, "{status:?}");
    assert!(!metadata(status, "nextAction").is_empty(), "nextAction missing: {status:?}");
    let retryable = metadata(status, "retryable");
    assert!(retryable == "true" || retryable == "false", "{status:?}");
}

/// Every entry of `space` as of `at_revision` (0 = latest), listed a page
/// at a time.
pub async fn tree(fs: &mut FileSystemClient<Channel>, space: &str, at_revision: u64) -> Vec<pb::Entry> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::ListRequest {
            space: space.into(),
            path: "/".into(),
            recursive: true,
            page_size: 7,
            page_token,
            at_revision,
            ..Default::default()
        };
        let page = fs.list(request).await.unwrap().into_inner();
        out.extend(page.entries);
        if page.next_page_token.is_empty() {
            return out;
        }
        page_token = page.next_page_token;
    }
}

pub fn write_text(space: &str, path: &str, content: &str) -> pb::WriteRequest {
    pb::WriteRequest {
        space: space.into(),
        path: path.into(),
        body: Some(pb::write_request::Body::Content(content.into())),
        ..Default::default()
    }
}

pub fn write_bytes(space: &str, path: &str, data: &[u8]) -> pb::WriteRequest {
    pb::WriteRequest {
        space: space.into(),
        path: path.into(),
        body: Some(pb::write_request::Body::Data(data.to_vec())),
        ..Default::default()
    }
}

pub fn read(space: &str, path: &str) -> pb::ReadRequest {
    pb::ReadRequest { space: space.into(), path: path.into(), ..Default::default() }
}

/// A text edit replacing `old` (which must occur once) with `new`.
pub fn replace(old: &str, new: &str) -> pb::TextEdit {
    pb::TextEdit {
        kind: Some(pb::text_edit::Kind::Replace(pb::ReplaceEdit {
            old_text: old.into(),
            new_text: new.into(),
            ..Default::default()
        })),
    }
}

/// A batch of `actions` in `space`, applied under idempotency key `key`.
pub fn apply_batch(space: &str, actions: Vec<pb::batch_action::Action>, key: &str) -> pb::BatchRequest {
    pb::BatchRequest {
        space: space.into(),
        actions: actions.into_iter().map(|a| pb::BatchAction { action: Some(a) }).collect(),
        apply: true,
        idempotency_key: key.into(),
        ..Default::default()
    }
}

/// Sends `authorization: Bearer <token>` with every call (for fronts that
/// run with `--tokens`).
#[derive(Clone)]
pub struct Bearer(pub &'static str);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", format!("Bearer {}", self.0).parse().unwrap());
        Ok(request)
    }
}
