//! PostgreSQL full-text search with the lexemes Cairn computes itself
//! (`cairn_store::fulltext::lexemes`): what PostgreSQL stores, that the
//! stems are PostgreSQL's own English stemmer's, and that a database whose
//! documents PostgreSQL analyzed is re-analyzed by the next migration.

use crate::conformance::{Backend, ORG, step};
use crate::pg::Pg;
use crate::pg_derived::admin_of;
use cairn_store::fulltext::FullTextQuery;
use cairn_store::fulltext::lexemes::lexeme;
use cairn_store::{Ledger, LedgerStore, SequencerConfig, StepFilter, WriteRequest};
use cairn_testkit::PgCluster;
use std::collections::BTreeSet;
use std::sync::Arc;

fn write(store: &Arc<dyn LedgerStore>, contents: &[&str]) {
    let ledger = Ledger::new(Arc::clone(store), SequencerConfig::default());
    for (i, content) in contents.iter().enumerate() {
        let step = step(&format!("s{i}"), "Observation", content);
        ledger.write(WriteRequest::Step(Box::new(step))).unwrap();
    }
    ledger.close();
    // A search first writes the documents still queued (their writing
    // follows the batch's commit), so `step_search` holds them all after.
    hits(store.as_ref(), "anything");
}

fn hits(store: &dyn LedgerStore, query: &str) -> usize {
    let query = FullTextQuery::parse(query).unwrap();
    store
        .full_text_search(ORG, &query, &StepFilter::default(), 50)
        .unwrap()
        .len()
}

/// The one integer `sql` answers.
fn scalar(admin: &mut postgres::Client, sql: &str) -> i64 {
    admin.query_one(sql, &[]).unwrap().get(0)
}

/// Takes a database back to before Cairn computed the lexemes: no
/// `search_lexemes` row (cairn_meta refuses deletes, hence the replica
/// role, which skips ordinary triggers) and no documents, which the next
/// migration then writes again.
fn forget_search_analysis(admin: &mut postgres::Client) {
    admin
        .batch_execute(
            "SET session_replication_role = replica;
             DELETE FROM cairn_meta WHERE key = 'search_lexemes';
             SET session_replication_role = DEFAULT;
             TRUNCATE step_search;",
        )
        .unwrap();
}

/// What PostgreSQL stores for a step is its document's lexemes at their
/// positions, as `tsvector` prints them: stems, numbers as written, stop
/// words kept, repeated words with every position.
#[test]
fn the_stored_tsvector_is_the_documents_lexemes() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("stored-tsvector");
    write(&store, &["The prices of the price, Q4: apple!"]);
    let doc: String = admin_of(&backend, "stored-tsvector")
        .query_one("SELECT doc::text FROM step_search", &[])
        .unwrap()
        .get(0);
    assert_eq!(doc, "'appl':7 'of':3 'price':2,5 'q4':6 'the':1,4");
}

/// Every stored `tsvector` survives its text form (what `pg_dump`,
/// `COPY` and a restore use), the longest lexeme kept included; a longer
/// word is left out.
#[test]
fn stored_tsvectors_survive_a_dump_and_restore() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("dump-restore");
    let longest = "k".repeat(2_046);
    let longer = "l".repeat(2_047);
    write(
        &store,
        &[
            &format!("blob {longest} attached"),
            &format!("blob {longer} attached"),
        ],
    );
    let mut admin = admin_of(&backend, "dump-restore");
    let rows = admin
        .query(
            "SELECT doc::text::tsvector = doc, length(doc) FROM step_search ORDER BY id",
            &[],
        )
        .unwrap();
    let found: Vec<(bool, i32)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(found, vec![(true, 3), (true, 2)]);
}

/// Cairn's stems are those of PostgreSQL's `english_stem` (both Snowball
/// English) for every word of the operations guide, the threat model and
/// the format that PostgreSQL does not drop as a stop word.
#[test]
fn lexemes_are_postgresql_english_stems() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let url = cluster.create_database("stems");
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let text = concat!(
        include_str!("../../../../docs/OPERATIONS.md"),
        include_str!("../../../../docs/SECURITY.md"),
        include_str!("../../../../docs/FORMAT.md")
    );
    let words: Vec<String> = cairn_store::fulltext::segment(text)
        .split(' ')
        .filter(|w| !w.is_empty() && !w.chars().any(char::is_numeric))
        .map(str::to_owned)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(words.len() > 2_000, "{} words", words.len());
    let rows = client
        .query(
            "SELECT w, (ts_lexize('english_stem', w))[1] FROM UNNEST($1::text[]) AS w",
            &[&words],
        )
        .unwrap();
    let mut compared = 0;
    let mut differ = Vec::new();
    for row in rows {
        let word: String = row.get(0);
        // None: a stop word (PostgreSQL drops it; Cairn keeps it).
        if let Some(stem) = row.get::<_, Option<String>>(1) {
            compared += 1;
            if lexeme(&word) != stem {
                differ.push(format!("{word}: {} vs {stem}", lexeme(&word)));
            }
        }
    }
    assert!(compared > 2_000, "{compared} of {} words", words.len());
    assert!(differ.is_empty(), "{differ:?}");
}

/// A database whose `step_search` PostgreSQL's `to_tsvector('english')`
/// wrote (before Cairn computed lexemes: no `search_lexemes` row) has its
/// documents re-analyzed by the schema owner's next migration, once:
/// afterwards a phrase with a stop word finds its step, which the old
/// rows (stop words dropped) could not.
#[test]
fn an_older_databases_documents_are_reanalyzed_once() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("reanalyzed");
    write(
        &store,
        &["the zeppelin schedule slipped", "retire the airship fleet"],
    );
    assert_eq!(hits(store.as_ref(), "\"the zeppelin\""), 1);
    drop(store);
    let mut admin = admin_of(&backend, "reanalyzed");
    // As the previous version wrote it: PostgreSQL's analysis, no row
    // saying otherwise.
    forget_search_analysis(&mut admin);
    admin
        .batch_execute(
            "INSERT INTO step_search (id, org, doc)
               SELECT id, org, to_tsvector('english', content) FROM entries WHERE type = 'step';",
        )
        .unwrap();
    let phrase = "SELECT count(*) FROM step_search WHERE doc @@ $$'the' <-> 'zeppelin'$$::tsquery";
    assert_eq!(
        scalar(&mut admin, phrase),
        0,
        "the old rows dropped the stop word"
    );
    cairn_store::pg::migrate(&mut admin).unwrap();
    assert_eq!(scalar(&mut admin, phrase), 1);
    let marks = "SELECT count(*) FROM cairn_meta WHERE key = 'search_lexemes'";
    assert_eq!(scalar(&mut admin, "SELECT count(*) FROM step_search"), 2);
    assert_eq!(scalar(&mut admin, marks), 1);
    let store = backend.open("reanalyzed");
    assert_eq!(hits(store.as_ref(), "\"the zeppelin\""), 1);
    assert_eq!(hits(store.as_ref(), "\"the airship\" fleet"), 1);
    // Once: a second migration finds nothing to do.
    cairn_store::pg::migrate(&mut admin).unwrap();
    assert_eq!(scalar(&mut admin, marks), 1);
}

/// Re-indexing reads the steps `step_search` lacks a page at a time, each
/// page ending past 32 MB of text (`INDEX_PAGE_BYTES`, counted over the
/// content and payload columns): with steps of about 815 KB (a content
/// and three payloads near the default limits; the payloads blank, so
/// that the documents stay small and the test quick), the 48 steps take
/// two such pages, and every one of them, on either side of the cut, is
/// indexed and found again.
#[test]
fn reindexing_pages_of_large_steps_indexes_every_one() {
    let Some(cluster) = PgCluster::start() else {
        return;
    };
    let backend = Pg::new(cluster);
    let store = backend.open("large_steps");
    const STEPS: usize = 48;
    let blank = || serde_json::json!(" ".repeat(250_000));
    let ledger = Ledger::new(Arc::clone(&store), SequencerConfig::default());
    for i in 0..STEPS {
        // A word only this step has, then 64 KB of content.
        let content = format!("zeppelin{i}x {}", "airship ".repeat(8_000));
        let mut s = step(&format!("s{i}"), "Observation", &content);
        s.input = Some(blank());
        s.output = Some(blank());
        s.metadata = Some(serde_json::json!({ "notes": " ".repeat(250_000) }));
        ledger.write(WriteRequest::Step(Box::new(s))).unwrap();
    }
    ledger.close();
    drop(store);
    let mut admin = admin_of(&backend, "large_steps");
    let text_bytes = scalar(
        &mut admin,
        "SELECT sum(octet_length(content) + octet_length(input_data)
                  + octet_length(output_data) + octet_length(metadata))::int8
         FROM entries WHERE type = 'step'",
    );
    assert!(
        text_bytes > 36 << 20,
        "{text_bytes} bytes: more than one page"
    );
    // As a database from before Cairn's lexemes: its documents go and are
    // written again by the migration, a page at a time.
    forget_search_analysis(&mut admin);
    cairn_store::pg::migrate(&mut admin).unwrap();
    assert_eq!(
        scalar(&mut admin, "SELECT count(*) FROM step_search"),
        STEPS as i64
    );
    let store = backend.open("large_steps");
    for i in 0..STEPS {
        assert_eq!(
            hits(store.as_ref(), &format!("zeppelin{i}x")),
            1,
            "step {i}"
        );
    }
}
