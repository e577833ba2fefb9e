//! `cairn admin`: orgs and API keys on the data directory, no server
//! needed, and the repair of an org's stored tree rows.

use super::*;

#[derive(Debug, Subcommand)]
pub(super) enum AdminCommand {
    /// List the orgs that have a log or keys.
    Orgs,
    /// Create an API key for --org; the token is printed once. Creating the
    /// first admin key of a new org creates the org.
    CreateKey {
        /// writer, reader, auditor or admin.
        #[arg(long)]
        role: String,
        /// Bind the key to one agent: it may only write as that agent.
        #[arg(long)]
        agent: Option<String>,
        /// A label for people.
        #[arg(long, default_value = "")]
        label: String,
        /// Make the key stop working this many days from now (it is then
        /// refused as a revoked key is, and stays listed).
        #[arg(long, conflicts_with = "expires_at", value_parser = clap::value_parser!(u32).range(1..=36_500))]
        expires_in_days: Option<u32>,
        /// Make the key stop working at this time (RFC 3339, in the
        /// future, such as 2027-01-31T00:00:00Z).
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// List the API keys of --org (never their tokens).
    ListKeys,
    /// Revoke an API key of --org. The org's last admin key in use that is
    /// not bound to an agent is kept (checked with the revocation, against
    /// a server revoking beside it) unless --even-the-last-admin is given.
    RevokeKey {
        /// The key's id (the middle part of its token).
        id: String,
        /// Revoke it even if it is the org's last admin key in use: no key
        /// of the org can then manage keys through the API (`cairn admin
        /// create-key` still can).
        #[arg(long)]
        even_the_last_admin: bool,
    },
    /// Rebuild --org's stored Merkle subtree rows (the `nodes` table, which
    /// proofs and roots are computed from) from its log, when `cairn
    /// verify` names one missing, wrong, unusable or past the log's end.
    /// The log's records and checkpoints are verified first; if they do
    /// not verify nothing is written. Then the org is verified as `cairn
    /// verify` does. On the embedded store stop `cairn serve` first; on
    /// PostgreSQL run it as the owner of the tables, beside the servers.
    RepairTree,
}

pub(super) fn admin(cli: &Cli, store: &dyn LedgerStore, command: &AdminCommand) -> Result<Outcome> {
    use cairn_store::{ApiKey, Role};
    match command {
        AdminCommand::Orgs => {
            let mut orgs = store.orgs()?;
            orgs.extend(store.key_orgs()?);
            orgs.sort();
            orgs.dedup();
            if cli.json {
                println!("{}", json!(orgs));
            } else {
                for org in orgs {
                    println!("{org}");
                }
            }
        }
        AdminCommand::CreateKey {
            role,
            agent,
            label,
            expires_in_days,
            expires_at,
        } => {
            cairn_core::record::validate_id("org_id", &cli.org)
                .map_err(|e| usage(e.to_string()))?;
            let role = Role::parse(role)
                .ok_or_else(|| usage("--role must be writer, reader, auditor or admin"))?;
            if let Some(agent) = agent {
                cairn_core::record::validate_id("agent_id", agent)
                    .map_err(|e| usage(e.to_string()))?;
            }
            if let Some(why) = cairn_store::key_label_refused(label) {
                return Err(usage(format!("--label: {why}")));
            }
            let created = now();
            let expires = match (expires_in_days, expires_at) {
                (Some(days), _) => Some(
                    cairn_core::Timestamp::from_micros(
                        created.as_micros() + i64::from(*days) * 86_400_000_000,
                    )
                    .ok_or_else(|| usage("--expires-in-days is too far ahead"))?,
                ),
                (None, Some(text)) => Some(
                    cairn_store::key_expiry(text, created)
                        .map_err(|why| usage(format!("--expires-at {why}")))?,
                ),
                (None, None) => None,
            };
            let (mut key, token) =
                ApiKey::generate(&cli.org, role, agent.as_deref(), label, created)?;
            key.expires_at = expires;
            store.put_api_key(&key)?;
            if cli.json {
                println!(
                    "{}",
                    json!({"id": key.id, "org_id": key.org_id, "role": role.as_str(), "agent_id": key.agent_id, "token": token,
                           "expires_at": key.expires_at.map(|t| t.to_string())})
                );
            } else {
                println!("{token}");
                eprintln!(
                    "created {role} key {} for org {}{} (the token above is shown once)",
                    key.id,
                    cli.org,
                    key.expires_at
                        .map(|t| format!(", expiring at {t}"))
                        .unwrap_or_default()
                );
            }
            // An org whose keys cannot manage keys (a new org given a
            // reader key, say): say how it gets one that can.
            let manages =
                |k: &ApiKey| k.role.can_admin() && k.agent_id.is_none() && k.usable_at(now());
            if !store.api_keys(&cli.org)?.iter().any(manages) {
                eprintln!(
                    "note: org {} has no admin key in use that is not bound to an agent, so no key of it can manage its keys through the API; `cairn admin create-key --org {} --role admin` makes one",
                    cli.org, cli.org
                );
            }
        }
        AdminCommand::ListKeys => {
            let keys = store.api_keys(&cli.org)?;
            if keys.is_empty() {
                // Said on stderr (the JSON answer stays an empty array): an
                // empty listing is as often a mistyped org as an org
                // without keys.
                eprintln!(
                    "cairn: org {} has no API keys ({}); `cairn admin orgs` lists the orgs, `cairn admin create-key --org {} --role admin` makes a key",
                    cli.org,
                    store_location(cli),
                    cli.org
                );
            }
            if cli.json {
                let v: Vec<Value> = keys
                    .iter()
                    .map(|k| json!({"id": k.id, "role": k.role.as_str(), "agent_id": k.agent_id, "label": k.label,
                                    "created_at": k.created_at.to_string(), "revoked_at": k.revoked_at.map(|t| t.to_string()),
                                    "expires_at": k.expires_at.map(|t| t.to_string())}))
                    .collect();
                println!("{}", Value::Array(v));
            } else {
                for k in keys {
                    println!(
                        "{}  {:<8} {:<16} {:<20} {}",
                        k.id,
                        k.role.as_str(),
                        k.agent_id.as_deref().unwrap_or("-"),
                        k.label,
                        if k.revoked_at.is_some() {
                            "revoked".to_owned()
                        } else if !k.usable_at(now()) {
                            format!("expired at {}", k.expires_at.unwrap_or_default())
                        } else if let Some(end) = k.expires_at {
                            format!("active until {end}")
                        } else {
                            "active".to_owned()
                        }
                    );
                }
            }
        }
        AdminCommand::RevokeKey {
            id,
            even_the_last_admin,
        } => {
            let outcome = if *even_the_last_admin {
                if store.revoke_api_key(&cli.org, id, now())? {
                    cairn_store::KeyRevocation::Revoked
                } else {
                    cairn_store::KeyRevocation::Unknown
                }
            } else {
                store.revoke_api_key_unless_last_admin(&cli.org, id, None, now())?
            };
            match outcome {
                cairn_store::KeyRevocation::Revoked => println!("revoked {id}"),
                cairn_store::KeyRevocation::Unknown => {
                    return Err(usage(format!("org {} has no active key {id}", cli.org)));
                }
                cairn_store::KeyRevocation::LastAdmin => {
                    return Err(usage(format!(
                        "key {id} is org {}'s last admin key in use: create another first (`cairn admin create-key --org {} --role admin`), or give --even-the-last-admin to revoke it anyway",
                        cli.org, cli.org
                    )));
                }
            }
        }
        AdminCommand::RepairTree => return repair_tree(cli, store),
    }
    Ok(Outcome::Success)
}

/// `cairn admin repair-tree`: see [`AdminCommand::RepairTree`].
fn repair_tree(cli: &Cli, store: &dyn LedgerStore) -> Result<Outcome> {
    let started = Instant::now();
    let org = cli.org.as_str();
    if !store.orgs()?.iter().any(|name| name == org) {
        return Err(usage(format!("org {org} has no log in this store")));
    }
    let total = store.log_size(org)?;
    let bar = progress_bar(total, "verifying the records");
    let repair = cairn_store::ops::repair_tree(store, org, &mut |n| bar.set_position(n))?;
    bar.finish_and_clear();
    let Some(rewritten) = repair.rewritten else {
        if !cli.json {
            eprintln!(
                "org {org}: the log's records or checkpoints do not verify, so its tree rows were not rebuilt from them (nothing was written):"
            );
        }
        return report(
            cli,
            &repair.records.verdict,
            started,
            json!({"org_id": org, "log_size": repair.records.log_size, "repaired": false}),
        );
    };
    if !cli.json {
        println!(
            "org {org}: tree rows rebuilt from {} verified records: {} missing written, {} differing replaced, {} unusable or past the log's end removed",
            repair.records.log_size, rewritten.missing, rewritten.replaced, rewritten.unusable
        );
    }
    let bar = progress_bar(total, "verifying");
    let after = verify_org(store, org, &[], &[], &mut |n| bar.set_position(n))?;
    bar.finish_and_clear();
    report(
        cli,
        &after.verdict,
        started,
        json!({
            "org_id": org, "log_size": after.log_size, "repaired": true,
            "missing_written": rewritten.missing, "replaced": rewritten.replaced,
            "unusable_removed": rewritten.unusable,
        }),
    )
}
