//! `cairn mcp`: the MCP tools over stdio, for agents that start Cairn as a
//! subprocess, acting for `--org` as its local operator.

use super::*;

pub(super) fn mcp_stdio(cli: &Cli, agent: Option<String>) -> Result<Outcome> {
    // stdout carries the protocol: logs go to stderr only.
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let store = match open_store(cli, true) {
        Ok(store) => store,
        Err(e) => {
            refuse_the_handshake(&format!("{e:#}"));
            return Err(e);
        }
    };
    // An agent may start a new org with its first step, so an unknown org
    // is no error; said on stderr (the protocol's log), since a mistyped
    // one would otherwise answer every read with nothing.
    if require_known_org(cli, store.as_ref()).is_err() {
        tracing::warn!(
            "org {} has no records yet ({}): reads answer nothing until a step is logged; check --org or CAIRN_ORG if that is not expected",
            cli.org,
            store_location(cli)
        );
    }
    let ledger = Arc::new(Ledger::new(store, SequencerConfig::default()));
    let config = cairn_server::ServerConfig {
        enabled: cli.enabled,
        embedder: cli.embedding.embedder()?,
        embedding_batch: cli.embedding.embedding_batch as usize,
        ..cairn_server::ServerConfig::default()
    };
    let state = cairn_server::AppState::new(Arc::clone(&ledger), config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Each line is read as strictly as a `/mcp` body before the SDK reads it.
    runtime
        .block_on(cairn_server::mcp::stdio::serve_stdio(
            cairn_server::mcp::CairnMcp::local(state, &cli.org, agent),
        ))
        .context("serving MCP on stdio")?;
    drop(runtime);
    if let Ok(ledger) = Arc::try_unwrap(ledger) {
        ledger.close();
    }
    Ok(Outcome::Success)
}

/// Answers the client's first request (its `initialize`) with a JSON-RPC
/// error saying why the server cannot start (the data directory in use by
/// `cairn serve`, a store that will not open), so that an MCP client shows
/// the cause rather than "connection closed". Waits at most 5 s for that
/// request (a person who started `cairn mcp` in a terminal sends none);
/// a first line that is not a JSON-RPC request gets nothing.
fn refuse_the_handshake(why: &str) {
    use std::io::{BufRead as _, Read as _, Write as _};
    let (tx, rx) = std::sync::mpsc::channel::<std::io::Result<String>>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read =
            std::io::BufReader::new(std::io::stdin().lock().take(1 << 20)).read_line(&mut line);
        let _ = tx.send(read.map(|_| line));
    });
    let Ok(Ok(line)) = rx.recv_timeout(std::time::Duration::from_secs(5)) else {
        return;
    };
    let Some(id) = serde_json::from_str::<serde_json::Value>(&line)
        .ok()
        .and_then(|request| request.get("id").cloned())
        .filter(|id| id.is_string() || id.is_number())
    else {
        return;
    };
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32000, "message": format!("cairn mcp cannot start: {why}")},
    });
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{answer}");
    let _ = out.flush();
}
