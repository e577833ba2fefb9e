//! Connections to PostgreSQL: bounding how long one waits on a silent
//! network, connecting, and [`Db`], the query helper that keeps each
//! statement prepared once per connection, with the small row and integer
//! conversions every query uses. Nothing here knows the ledger's tables.

use super::copy::CopyRows;
use crate::{DbContext, StoreError};
use postgres::types::{FromSql, ToSql, Type};
use postgres::{CopyInWriter, GenericClient, NoTls, Row, Statement};
use std::collections::HashMap;
use std::time::Duration;

/// Bounds how long a connection waits on a network that stopped answering
/// (see [`PgOptions::network_timeout`](super::PgOptions::network_timeout)). Without it a partition leaves the
/// writer waiting for the kernel to give up, many minutes, with every
/// write queued behind it.
pub(super) fn bound_network_waits(config: &mut postgres::Config, timeout: Duration) {
    let timeout = timeout.max(Duration::from_secs(1));
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeout);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(timeout);
    }
    // Probes start after half the timeout without traffic and three more
    // fit in the rest, so an idle connection to a vanished peer is found
    // dead within about the timeout.
    if config.get_keepalives() && config.get_keepalives_interval().is_none() {
        config.keepalives_idle(timeout / 2);
        config.keepalives_interval((timeout / 6).max(Duration::from_secs(1)));
        config.keepalives_retries(3);
    }
}

/// A connection with its prepared statements (which PostgreSQL keeps per
/// connection, across transactions).
pub(super) struct PgConn {
    pub(super) client: postgres::Client,
    pub(super) statements: HashMap<&'static str, Statement>,
}

impl PgConn {
    pub(super) fn db(&mut self) -> Db<'_, postgres::Client> {
        Db {
            client: &mut self.client,
            statements: &mut self.statements,
        }
    }
}

/// Queries through a client (or a transaction), preparing each statement
/// once per connection.
pub(super) struct Db<'a, C: GenericClient> {
    pub(super) client: &'a mut C,
    pub(super) statements: &'a mut HashMap<&'static str, Statement>,
}

pub(super) type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl<C: GenericClient> Db<'_, C> {
    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).context("preparing a statement")?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// A query built at run time (not kept prepared: its text varies).
    pub(super) fn query_built(
        &mut self,
        sql: &str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Vec<Row>, StoreError> {
        self.client.query(sql, params).context(what)
    }

    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Vec<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query(&statement, params).context(what)
    }

    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Option<Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query_opt(&statement, params).context(what)
    }

    pub(super) fn query_one(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<Row, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query_one(&statement, params).context(what)
    }

    /// Runs the `COPY ... FROM STDIN BINARY` statement `sql` of columns
    /// `types` with the rows `encode` pushes, written to the connection as
    /// they are encoded (see [`CopyRows`]).
    pub(super) fn copy_in(
        &mut self,
        sql: &'static str,
        types: &'static [Type],
        what: &str,
        encode: impl FnOnce(&mut CopyRows<CopyInWriter<'_>>) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        let writer = self.client.copy_in(&statement).context(what)?;
        let mut rows = CopyRows::new(writer, types);
        // An error drops the writer unfinished, which aborts the COPY.
        encode(&mut rows)?;
        rows.finish()?.finish().context(what)
    }

    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: Params<'_>,
        what: &str,
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        self.client.execute(&statement, params).context(what)
    }
}

/// A column of a row, with context on failure.
pub(super) fn col<'r, T: FromSql<'r>>(row: &'r Row, index: usize) -> Result<T, StoreError> {
    row.try_get(index).context("reading a row")
}

pub(super) fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(super) fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(super) fn poisoned() -> StoreError {
    StoreError::Corrupt("a previous panic poisoned the store's lock".into())
}

pub(super) fn connect(config: &postgres::Config) -> Result<PgConn, StoreError> {
    let mut client = config.connect(NoTls).context("connecting to PostgreSQL")?;
    // Statements stay prepared for the connection's life; a generic plan
    // chosen while the tables were small (a sequential scan of `entries`)
    // would otherwise be kept as they grow, until the next ANALYZE.
    client
        .batch_execute("SET plan_cache_mode = force_custom_plan")
        .context("configuring the connection")?;
    Ok(PgConn {
        client,
        statements: HashMap::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::bound_network_waits;
    use std::time::Duration;

    #[test]
    fn network_waits_are_bounded_unless_the_url_says_otherwise() {
        let mut config: postgres::Config = "host=db user=cairn".parse().unwrap_or_default();
        bound_network_waits(&mut config, Duration::from_secs(30));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(30)));
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(30))
        );
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(15));
        assert_eq!(
            config.get_keepalives_interval(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(config.get_keepalives_retries(), Some(3));

        let mut config: postgres::Config =
            "host=db connect_timeout=3 keepalives=0 tcp_user_timeout=7"
                .parse()
                .unwrap_or_default();
        bound_network_waits(&mut config, Duration::from_secs(30));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(config.get_tcp_user_timeout(), Some(&Duration::from_secs(7)));
        assert!(!config.get_keepalives());
    }
}
