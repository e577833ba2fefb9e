//! `GET /v1/search` over a real socket: full-text, semantic and hybrid
//! modes, filters, highlighted snippets, Japanese, an erased step gone
//! from every mode, and malformed searches refused with their field.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

fn search(server: &Server, query: &str, token: &str) -> Value {
    let reply = get(server, &format!("/v1/search?{query}"), token);
    assert_eq!(reply.status, 200, "{query}: {}", reply.text());
    reply.json()
}

fn hits(body: &Value) -> Vec<String> {
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{}#{}", r["session_id"].as_str().unwrap(), r["step_index"]))
        .collect()
}

#[test]
fn search_finds_by_words_meaning_and_filters_and_forgets_erased_steps() {
    let server = start(ServerConfig::default());
    let writer = key_for(&server, "acme", Role::Writer, None);
    let admin = key_for(&server, "acme", Role::Admin, None);
    let reader = key_for(&server, "acme", Role::Reader, None);
    let mut traces = Vec::new();
    for (session, agent, kind, content) in [
        (
            "pricing",
            "analyst",
            "observation",
            "The pricing change hit SMB accounts hardest.",
        ),
        (
            "pricing",
            "analyst",
            "decision",
            "Raise enterprise prices by 4% next quarter.",
        ),
        (
            "support",
            "helper",
            "observation",
            "Customer Jane Doe asked about her refund.",
        ),
        (
            "support",
            "helper",
            "action",
            "[実行] 注文テーブルを検索しています",
        ),
        (
            "support",
            "helper",
            "final_answer",
            "Refund approved: enterprise customers get refunds within 5 days.",
        ),
    ] {
        let reply = post(
            &server,
            "/v1/steps",
            &writer,
            &step(session, agent, kind, content),
        );
        assert_eq!(reply.status, 201, "{}", reply.text());
        traces.push(reply.json()["trace_id"].as_str().unwrap().to_owned());
    }
    // Ingest only queued the sampled steps: the background embedder
    // embeds them.
    settle_embeddings(&server);

    // Full text: stems, phrases, prefixes, exclusions, Japanese.
    let body = search(&server, "q=pricing&mode=fulltext", &reader);
    assert_eq!(body["mode"], "fulltext");
    let mut found = hits(&body);
    found.sort();
    assert_eq!(found, vec!["pricing#0", "pricing#1"]);
    assert_eq!(
        hits(&search(
            &server,
            "q=%22enterprise+customers%22&mode=fulltext",
            &reader
        )),
        vec!["support#2"]
    );
    assert_eq!(
        hits(&search(
            &server,
            "q=enterprise+-refund&mode=fulltext",
            &reader
        )),
        vec!["pricing#1"]
    );
    let japanese = search(&server, "q=%E6%B3%A8%E6%96%87&mode=fulltext", &reader); // 注文
    assert_eq!(hits(&japanese), vec!["support#1"]);
    let first = &japanese["results"][0];
    let snippet: Vec<char> = first["snippet"].as_str().unwrap().chars().collect();
    let [start, end] = [
        first["highlights"][0][0].as_u64().unwrap() as usize,
        first["highlights"][0][1].as_u64().unwrap() as usize,
    ];
    assert_eq!(snippet[start..end].iter().collect::<String>(), "注文");
    assert_eq!(first["matched_by"], json!(["fulltext"]));

    // Highlights mark the stemmed words.
    let body = search(
        &server,
        "q=price&mode=fulltext&session_id=pricing&kind=decision",
        &reader,
    );
    let result = &body["results"][0];
    let snippet: Vec<char> = result["snippet"].as_str().unwrap().chars().collect();
    let marked: Vec<String> = result["highlights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            snippet[r[0].as_u64().unwrap() as usize..r[1].as_u64().unwrap() as usize]
                .iter()
                .collect()
        })
        .collect();
    assert_eq!(marked, vec!["prices"]);

    // Filters in every mode.
    for mode in ["fulltext", "semantic", "hybrid"] {
        let body = search(
            &server,
            &format!("q=enterprise&mode={mode}&agent_id=helper"),
            &reader,
        );
        assert!(
            hits(&body).iter().all(|h| h.starts_with("support#")),
            "{mode}: {body}"
        );
        let flagged = search(
            &server,
            &format!("q=enterprise&mode={mode}&status=flagged"),
            &reader,
        );
        assert_eq!(hits(&flagged), Vec::<String>::new(), "{mode}");
    }
    // A text unlike every step: no full-text hit, and no semantic hit of
    // similarity 0 or less (every step, each scored 0, had been listed).
    let body = search(&server, "q=zzzznotfound&mode=fulltext", &reader);
    assert_eq!(hits(&body), Vec::<String>::new(), "{body}");
    let semantic = search(&server, "q=zzzznotfound&mode=semantic", &reader);
    for hit in semantic["results"].as_array().unwrap() {
        assert!(hit["score"].as_f64().unwrap() > 0.0, "{semantic}");
    }
    // Hybrid with the built-in word-hash embedder adds no step full text
    // did not find (its other neighbours only share hash buckets).
    let hybrid = search(&server, "q=zzzznotfound", &reader);
    assert_eq!(hits(&hybrid), Vec::<String>::new(), "{hybrid}");
    let some = search(&server, "q=refund", &reader);
    let text = search(&server, "q=refund&mode=fulltext", &reader);
    let mut by_text = hits(&text);
    let mut by_hybrid = hits(&some);
    by_text.sort();
    by_hybrid.sort();
    assert_eq!(by_hybrid, by_text, "{some}");
    // Semantic and hybrid say which embedder ranked them.
    let hybrid = search(&server, "q=refund+approved", &reader);
    assert_eq!(hybrid["mode"], "hybrid");
    assert!(
        hybrid["embedder"]
            .as_str()
            .unwrap()
            .starts_with("word-hash")
    );
    assert_eq!(hits(&hybrid)[0], "support#2");
    assert!(
        hybrid["results"][0]["matched_by"].as_array().unwrap().len() == 2,
        "{hybrid}"
    );

    // An erased step is gone from every mode.
    let erase = post(
        &server,
        &format!("/v1/steps/{}/erase", traces[4]),
        &admin,
        &json!({"reason": "request"}),
    );
    assert_eq!(erase.status, 200, "{}", erase.text());
    for mode in ["fulltext", "semantic", "hybrid"] {
        let body = search(
            &server,
            &format!("q=refund+approved+enterprise&mode={mode}"),
            &reader,
        );
        assert!(
            !hits(&body).contains(&"support#2".to_owned()),
            "{mode}: {body}"
        );
        assert!(!body.to_string().contains("within 5 days"), "{mode}");
    }

    // Malformed searches are refused with their code and field.
    for (query, code, field) in [
        ("", "missing_field", "q"),
        ("q=", "invalid_argument", "q"),
        ("q=-only", "invalid_argument", "q"),
        ("q=x&mode=fuzzy", "invalid_argument", "mode"),
        ("q=x&status=maybe", "invalid_argument", "status"),
        ("q=x&kind=daydream", "invalid_argument", "kind"),
        ("q=x&since=yesterday", "invalid_argument", "since"),
        ("q=x&limit=0", "invalid_argument", "limit"),
        ("q=x&agent_id=a%20b", "malformed_id", "agent_id"),
    ] {
        let reply = get(&server, &format!("/v1/search?{query}"), &reader);
        assert_eq!(reply.status, 400, "{query}: {}", reply.text());
        let error = &reply.json()["error"];
        assert_eq!(
            (error["code"].as_str(), error["field"].as_str()),
            (Some(code), Some(field)),
            "{query}: {error}"
        );
    }
}

/// A fake OpenAI-compatible embedding service: the word hash of each
/// input, under the model name asked for; it counts its requests and
/// answers 500 while `down` is set.
fn fake_embedding_service(
    requests: Arc<std::sync::atomic::AtomicUsize>,
    down: Arc<std::sync::atomic::AtomicBool>,
) -> std::net::SocketAddr {
    use axum::routing::post;
    use std::sync::atomic::Ordering::SeqCst;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new().route(
                "/v1/embeddings",
                post(move |axum::Json(body): axum::Json<Value>| {
                    let requests = Arc::clone(&requests);
                    let down = Arc::clone(&down);
                    async move {
                        requests.fetch_add(1, SeqCst);
                        if down.load(SeqCst) {
                            return Err(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
                        }
                        assert_eq!(body["model"], "fake-minilm");
                        // Reversed order, with indexes: the client sorts.
                        let data: Vec<Value> = body["input"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .enumerate()
                            .rev()
                            .map(|(i, text)| {
                                let v = cairn_store::embed::embed(text.as_str().unwrap());
                                json!({"object": "embedding", "index": i, "embedding": v.to_vec()})
                            })
                            .collect();
                        Ok(axum::Json(json!({"object": "list", "data": data})))
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// `--embedding-endpoint`: steps are embedded in the background by the
/// service, semantic search embeds the query with it and names it, and
/// while the service is down ingest still succeeds, the steps wait in the
/// queue (visible in /metrics) and are embedded once it is back.
#[test]
fn an_embedding_service_embeds_in_the_background_and_outages_only_delay_it() {
    use std::sync::atomic::Ordering::SeqCst;
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = fake_embedding_service(Arc::clone(&requests), Arc::clone(&down));
    let embedder = cairn_server::embedding_endpoint::EndpointEmbedder::connect(
        cairn_server::embedding_endpoint::EndpointConfig {
            url: format!("http://{addr}"),
            model: "fake-minilm".into(),
            api_key: None,
        },
    )
    .unwrap();
    assert_eq!(embedder.dimensions(), cairn_store::embed::DIMENSIONS);
    let server = start(ServerConfig {
        embedder: Arc::new(embedder),
        ..ServerConfig::default()
    });
    let writer = key_for(&server, "acme", Role::Writer, None);
    down.store(true, SeqCst);
    for content in [
        "Raise enterprise prices by 4% next quarter.",
        "Refund approved for the customer.",
    ] {
        let reply = post(
            &server,
            "/v1/steps",
            &writer,
            &step("s1", "analyst", "decision", content),
        );
        assert_eq!(reply.status, 201, "ingest never waits for the embedder");
    }
    // The service is down: the steps wait, and /metrics says so.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let metrics = cairn_testkit::http::call(server.addr, "GET", "/metrics", None, None).text();
        if metrics.contains("cairn_embedding_backlog 2")
            && !metrics.contains("cairn_embedding_failures_total 0")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{metrics}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A semantic query cannot be embedded either: 503, and full text
    // still answers.
    let failed = get(&server, "/v1/search?q=pricing&mode=semantic", &writer);
    assert_eq!(
        (failed.status, failed.code().as_str()),
        (503, "unavailable")
    );
    assert_eq!(
        hits(&search(&server, "q=refund&mode=fulltext", &writer)),
        ["s1#1"]
    );
    down.store(false, SeqCst);
    settle_embeddings(&server);
    let body = search(&server, "q=enterprise+prices&mode=semantic", &writer);
    assert!(
        body["embedder"]
            .as_str()
            .unwrap()
            .starts_with("fake-minilm (256 dimensions, embedding service"),
        "{body}"
    );
    assert_eq!(hits(&body)[0], "s1#0", "{body}");
    // A semantic query is held to the query length too: the whole text
    // would go to the embedder.
    let long = format!("/v1/search?mode=semantic&q={}", "a".repeat(1_025));
    let refused = get(&server, &long, &writer);
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (400, "invalid_argument")
    );
}
