//! The settings of `cairn serve` that bound what clients may cost: sizes,
//! timeouts, connections, concurrency, rates, MCP sessions, analyst SQL,
//! where MCP may be reached from, and who may read the metrics. Each is a
//! flag and an environment variable; `docs/OPERATIONS.md` lists them with
//! their defaults (those of [`cairn_server::Limits`]).

use clap::Args;
use std::time::Duration;

/// Limits and access settings of `cairn serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeLimits {
    /// Largest request body on ordinary routes and MCP, in bytes.
    #[arg(long, env = "CAIRN_MAX_BODY_BYTES", default_value_t = 2 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Largest bundle `POST /v1/bundles/verify` reads, in bytes (streamed).
    #[arg(long, env = "CAIRN_MAX_BUNDLE_BYTES", default_value_t = 256 * 1024 * 1024)]
    max_bundle_bytes: usize,
    /// Longest line of an uploaded bundle, in bytes.
    #[arg(long, env = "CAIRN_MAX_BUNDLE_LINE_BYTES", default_value_t = 16 * 1024 * 1024)]
    max_bundle_line_bytes: usize,
    /// Seconds a client has to send a request's headers, from the
    /// connection opening or going idle (so also the idle keep-alive time).
    #[arg(long, env = "CAIRN_HEADER_TIMEOUT", default_value = "10", value_parser = seconds)]
    header_timeout: Duration,
    /// Seconds a request body may send nothing before the request ends (408).
    #[arg(long, env = "CAIRN_BODY_IDLE_TIMEOUT", default_value = "10", value_parser = seconds)]
    body_idle_timeout: Duration,
    /// Seconds a request body may take in all (408).
    #[arg(long, env = "CAIRN_BODY_TIMEOUT", default_value = "60", value_parser = seconds)]
    body_timeout: Duration,
    /// Seconds an uploaded bundle may take in all (408).
    #[arg(long, env = "CAIRN_BUNDLE_BODY_TIMEOUT", default_value = "600", value_parser = seconds)]
    bundle_body_timeout: Duration,
    /// Seconds a handler may take to start its response (503 timeout).
    #[arg(long, env = "CAIRN_REQUEST_TIMEOUT", default_value = "120", value_parser = seconds)]
    request_timeout: Duration,
    /// Seconds a response may wait for a client that stopped reading.
    #[arg(long, env = "CAIRN_WRITE_TIMEOUT", default_value = "30", value_parser = seconds)]
    write_timeout: Duration,
    /// Connections served at once.
    #[arg(long, env = "CAIRN_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// Connections one client address (an IPv6 /64) may hold at once; 0
    /// for no limit (behind a proxy, which shows one address for all).
    #[arg(long, env = "CAIRN_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 256)]
    max_connections_per_address: usize,
    /// Expensive operations (verification, export, SQL) run at once.
    #[arg(long, env = "CAIRN_MAX_EXPENSIVE", default_value_t = 4)]
    max_expensive: usize,
    /// Bytes streamed replays may hold at once (their step positions and
    /// batches not yet sent); one org at most half.
    #[arg(long, env = "CAIRN_REPLAY_BUFFER_BYTES", default_value_t = 256 * 1024 * 1024)]
    replay_buffer_bytes: usize,
    /// Seconds an expensive request waits for a free slot (then 503).
    #[arg(long, env = "CAIRN_EXPENSIVE_WAIT", default_value = "5", value_parser = seconds)]
    expensive_wait: Duration,
    /// Requests per second per API key (429 past it); 0 turns it off.
    #[arg(long, env = "CAIRN_RATE_PER_KEY", default_value_t = 1000)]
    rate_per_key: u32,
    /// Requests a key may make at once above its rate.
    #[arg(long, env = "CAIRN_RATE_BURST", default_value_t = 2000)]
    rate_burst: u32,
    /// MCP sessions one API key may hold open.
    #[arg(long, env = "CAIRN_MCP_SESSIONS_PER_KEY", default_value_t = 16)]
    mcp_sessions_per_key: usize,
    /// MCP sessions open in all.
    #[arg(long, env = "CAIRN_MCP_SESSIONS", default_value_t = 1024)]
    mcp_sessions: usize,
    /// Seconds an MCP session may go without a request before it ends.
    #[arg(long, env = "CAIRN_MCP_SESSION_IDLE", default_value = "300", value_parser = seconds)]
    mcp_session_idle: Duration,
    /// Seconds an analyst SQL query may run.
    #[arg(long, env = "CAIRN_SQL_TIMEOUT", default_value = "5", value_parser = seconds)]
    sql_timeout: Duration,
    /// Rows an analyst SQL answer may have.
    #[arg(long, env = "CAIRN_SQL_MAX_ROWS", default_value_t = 10_000)]
    sql_max_rows: usize,
    /// Bytes of one value of an analyst SQL answer (and, on SQLite, of any
    /// string a query builds); keep it above the largest stored row.
    #[arg(long, env = "CAIRN_SQL_MAX_VALUE_BYTES", default_value_t = 16 * 1024 * 1024)]
    sql_max_value_bytes: usize,
    /// Bytes of a whole analyst SQL answer (rows past it are dropped).
    #[arg(long, env = "CAIRN_SQL_MAX_ANSWER_BYTES", default_value_t = 16 * 1024 * 1024)]
    sql_max_answer_bytes: usize,
    /// On SQLite, run each analyst SQL query in a process of its own,
    /// bounded by the operating system and killed at its time limit
    /// (`false`: in the server's process, bounded by SQLite's limits only).
    #[arg(long, env = "CAIRN_SQL_WORKER", default_value_t = true, action = clap::ArgAction::Set)]
    sql_worker: bool,
    /// Bytes of heap an analyst SQL worker may hold (RLIMIT_DATA).
    #[arg(long, env = "CAIRN_SQL_WORKER_MEMORY_BYTES", default_value_t = 1024 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(32 * 1024 * 1024..))]
    sql_worker_memory_bytes: u64,
    /// Bytes any one temporary file of an analyst SQL worker may reach
    /// (RLIMIT_FSIZE: the files its sorts spill to).
    #[arg(long, env = "CAIRN_SQL_WORKER_FILE_BYTES", default_value_t = 1024 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(1024 * 1024..))]
    sql_worker_file_bytes: u64,
    /// Steps a session listing verifies at most (later sessions get
    /// chain_valid null).
    #[arg(long, env = "CAIRN_LIST_VERIFY_STEPS", default_value_t = 10_000)]
    list_verify_steps: u64,
    /// Seconds an API key looked up is trusted before it is read again: a
    /// key revoked by another process (`cairn admin revoke-key`, another
    /// server) still works this long; revocation through this server's
    /// API is immediate.
    #[arg(long, env = "CAIRN_KEY_CACHE_TTL", default_value = "5", value_parser = seconds)]
    key_cache_ttl: Duration,
    /// Host names MCP over HTTP answers to, besides localhost, 127.0.0.1
    /// and ::1 (comma-separated; `host` for any port, `host:port`, or `*`).
    /// Default: those plus the listen address, unless it is 0.0.0.0 or ::.
    #[arg(long, env = "CAIRN_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// Browser origins MCP over HTTP accepts (comma-separated,
    /// `scheme://host[:port]`, or `*`). Default: any origin on an allowed
    /// host.
    #[arg(long, env = "CAIRN_ALLOWED_ORIGINS", value_delimiter = ',')]
    allowed_origins: Vec<String>,
    /// Browser origins whose pages may call the REST API, the OTLP
    /// receiver and the tlog tiles across origins (CORS; comma-separated
    /// `scheme://host[:port]`, or `*`). Default: none, same origin only.
    #[arg(long, env = "CAIRN_CORS_ORIGINS", value_delimiter = ',')]
    cors_origins: Vec<String>,
    /// A token `GET /metrics` must present (Authorization: Bearer). Without
    /// it, metrics are served to clients on the server's own machine only.
    #[arg(long, env = "CAIRN_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
}

pub(crate) fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a positive number of seconds"))
}

impl ServeLimits {
    /// The analyst SQL worker: this very binary, run as
    /// [`crate::ANALYST_WORKER_COMMAND`]. On Linux through
    /// `/proc/self/exe`, which names the running binary even after a new
    /// one was installed over its path (the worker then stays the server's
    /// version, instead of failing to start or running another guard's).
    fn sql_worker(&self) -> Option<cairn_store::analyst::WorkerLimits> {
        if !self.sql_worker {
            return None;
        }
        let this_binary = std::path::Path::new("/proc/self/exe");
        let program = if this_binary.exists() {
            Ok(this_binary.to_path_buf())
        } else {
            std::env::current_exe()
        };
        match program {
            Ok(program) => Some(cairn_store::analyst::WorkerLimits {
                program,
                args: vec![crate::ANALYST_WORKER_COMMAND.into()],
                memory_bytes: self.sql_worker_memory_bytes,
                temp_file_bytes: self.sql_worker_file_bytes,
            }),
            Err(e) => {
                tracing::warn!(
                    "analyst SQL runs in the server's process: this binary's path is unknown ({e}); set CAIRN_SQL_WORKER=false to say so"
                );
                None
            }
        }
    }

    /// `--cors-origins` as a browser sends an origin: trimmed, lower case,
    /// without a trailing slash.
    pub(crate) fn cors_origins(&self) -> Vec<String> {
        self.cors_origins
            .iter()
            .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
            .filter(|o| !o.is_empty())
            .collect()
    }

    /// The server's configuration for a server listening on `listen`.
    pub(crate) fn config(
        &self,
        enabled: bool,
        listen: &std::net::SocketAddr,
    ) -> cairn_server::ServerConfig {
        let limits = cairn_server::Limits {
            header_timeout: self.header_timeout,
            body_idle_timeout: self.body_idle_timeout,
            body_timeout: self.body_timeout,
            bundle_body_timeout: self.bundle_body_timeout,
            request_timeout: self.request_timeout,
            write_timeout: self.write_timeout,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            max_expensive: self.max_expensive,
            expensive_wait: self.expensive_wait,
            replay_buffer_bytes: self.replay_buffer_bytes,
            max_bundle_line_bytes: self.max_bundle_line_bytes,
            rate_per_second: self.rate_per_key,
            rate_burst: self.rate_burst,
            mcp_sessions_per_key: self.mcp_sessions_per_key,
            mcp_sessions: self.mcp_sessions,
            mcp_session_idle: self.mcp_session_idle,
            sql: cairn_store::analyst::QueryLimits {
                max_rows: self.sql_max_rows,
                time: self.sql_timeout,
                max_value_bytes: self.sql_max_value_bytes,
                max_answer_bytes: self.sql_max_answer_bytes,
                worker: self.sql_worker(),
            },
            list_verify_steps: self.list_verify_steps,
        };
        let mut allowed_hosts = cairn_server::AllowedHosts::for_listen(listen);
        if !self.allowed_hosts.is_empty() {
            allowed_hosts.hosts = cairn_server::AllowedHosts::default().hosts;
            allowed_hosts.hosts.extend(
                self.allowed_hosts
                    .iter()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty()),
            );
        }
        allowed_hosts.origins = self
            .allowed_origins
            .iter()
            .map(|o| o.trim().to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        cairn_server::ServerConfig {
            max_body_bytes: self.max_body_bytes,
            max_bundle_bytes: self.max_bundle_bytes,
            key_cache_ttl: self.key_cache_ttl,
            enabled,
            limits,
            allowed_hosts,
            metrics_token: self.metrics_token.clone().filter(|t| !t.is_empty()),
            cors_origins: self.cors_origins(),
            ..cairn_server::ServerConfig::default()
        }
    }
}
