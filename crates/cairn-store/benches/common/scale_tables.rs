//! The scale benchmarks' tables: one row per milestone, each figure
//! beside its raw baseline, printed as Markdown for docs/PERFORMANCE.md.

use super::*;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = info
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{}, {cores} cores", cpu.unwrap_or("unknown CPU").trim())
}

type Cell = fn(&Row) -> String;

fn mbs(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

/// MB, s, MB/s.
fn volume((bytes, d): (u64, Duration)) -> String {
    let secs = d.as_secs_f64();
    format!("{:.1}, {secs:.2}, {:.1}", bytes as f64 / 1e6, mbs(bytes, d))
}

fn cadence(g: &Growth) -> String {
    if g.intervals.is_empty() {
        return "n/a | n/a".into();
    }
    let max = g.intervals.iter().copied().fold(f64::NAN, f64::max);
    let leaves: Vec<f64> = g.leaves.iter().map(|&l| l as f64).collect();
    format!(
        "{:.2} / {max:.2} | {:.0}",
        median(&g.intervals),
        median(&leaves)
    )
}

/// Each table's header (`{raw_insert}`, `{disk}`, `{open}` and
/// `{raw_open}` stand for the backend's [`Labels`]) and its cells.
const TABLES: [(&str, &[Cell]); 6] = [
    (
        "increment: steps/s (mean batch) | {raw_insert} | ratio | peak RSS MB | {disk} | canonical JSON B/step | disk / JSON",
        &[
            |r| format!("{:.0} ({:.0})", r.growth.steps_per_sec, r.growth.mean_batch),
            |r| format!("{:.0}", r.growth.raw_per_sec),
            |r| format!("{:.2}×", r.growth.steps_per_sec / r.growth.raw_per_sec),
            |r| format!("{:.0}", r.growth.peak_mb),
            |r| format!("{:.0}", r.disk_per_step),
            |r| format!("{:.0}", r.json_per_step),
            |r| format!("{:.2}×", r.disk_per_step / r.json_per_step),
        ],
    ),
    (
        "org 0 entries | verify records/s | raw read + SHA-256 rows/s | ratio | peak RSS MB during verify (before)",
        &[
            |r| r.org_entries.to_string(),
            |r| format!("{:.0}", r.verify_rate),
            |r| format!("{:.0}", r.raw_scan_rate),
            |r| format!("{:.3}×", r.verify_rate / r.raw_scan_rate),
            |r| format!("{:.0} ({:.0})", r.verify_peak_mb, r.rss_before_verify_mb),
        ],
    ),
    (
        "replay 1,000 steps ms | raw 1,000 rows ms | ratio | agent 0 sessions | first page p50 / p99 ms | half-way page p50 / p99 ms (after) | org half-way p50 / p99 ms (after) | raw page ms | first page / raw",
        &[
            |r| format!("{:.2}", ms(r.replay)),
            |r| format!("{:.2}", ms(r.raw_replay)),
            |r| format!("{:.1}×", ms(r.replay) / ms(r.raw_replay)),
            |r| r.agent_sessions.to_string(),
            |r| format!("{:.2} / {:.2}", ms(r.first_page.0), ms(r.first_page.1)),
            |r| {
                let (p50, p99, at) = r.deep_page;
                format!("{:.2} / {:.2} ({at})", ms(p50), ms(p99))
            },
            |r| {
                let (p50, p99, at) = r.org_deep_page;
                format!("{:.2} / {:.2} ({at})", ms(p50), ms(p99))
            },
            |r| format!("{:.3}", ms(r.raw_page)),
            |r| format!("{:.0}×", ms(r.first_page.0) / ms(r.raw_page)),
        ],
    ),
    (
        "org 0 leaves | inclusion p50 / p99 µs | consistency p50 / p99 µs | hashes per inclusion proof | raw point reads of as many leaf hashes, p50 µs | inclusion / raw",
        &[
            |r| r.org_entries.to_string(),
            |r| format!("{:.0} / {:.0}", us(r.inclusion.0), us(r.inclusion.1)),
            |r| format!("{:.0} / {:.0}", us(r.consistency.0), us(r.consistency.1)),
            |r| format!("{:.1}", r.proof_hashes),
            |r| format!("{:.0}", us(r.raw_point_reads)),
            |r| format!("{:.1}×", us(r.inclusion.0) / us(r.raw_point_reads)),
        ],
    ),
    (
        "session export: KB, ms, MB/s | raw 1,000 rows ms | ratio | org export: MB, s, MB/s | raw read of the org's rows: MB, s, MB/s | ratio",
        &[
            |r| {
                let (b, t) = r.session_export;
                format!("{:.0}, {:.1}, {:.1}", b as f64 / 1e3, ms(t), mbs(b, t))
            },
            |r| format!("{:.2}", ms(r.raw_replay)),
            |r| format!("{:.1}×", ms(r.session_export.1) / ms(r.raw_replay)),
            |r| volume(r.org_export),
            |r| volume(r.raw_org_read),
            |r| format!("{:.1}×", ms(r.org_export.1) / ms(r.raw_org_read.1)),
        ],
    ),
    (
        "{open} | {raw_open} | first write ms | second write ms | org 0 checkpoints while growing | interval median / max s | leaves per checkpoint, median | longest batch / maintenance s | growth s (with raw baseline) | measurements s",
        &[
            |r| format!("{:.1}", ms(r.open)),
            |r| format!("{:.2}", ms(r.raw_open)),
            |r| format!("{:.1}", ms(r.first_write)),
            |r| format!("{:.1}", ms(r.second_write)),
            |r| r.growth.checkpoints.to_string(),
            |r| cadence(&r.growth),
            |r| {
                format!(
                    "{:.2} / {:.2}",
                    r.growth.slowest_batch, r.growth.slowest_maintenance
                )
            },
            |r| format!("{:.1} ({:.1})", r.growth.secs, r.growth.total_secs),
            |r| format!("{:.1}", r.measure_secs),
        ],
    ),
];

pub(super) fn print_tables(labels: &Labels, rows: &[Row], total: Duration) {
    println!(
        "\n{}, measured {} on {} ({:.0} s in all). Org 0: a tenth of the store plus the 1,000-step session.{}",
        labels.title,
        cairn_store::now(),
        machine(),
        total.as_secs_f64(),
        labels.note
    );
    for (header, cells) in TABLES {
        let header = header
            .replace("{raw_insert}", labels.raw_insert)
            .replace("{disk}", labels.disk)
            .replace("{open}", labels.open)
            .replace("{raw_open}", labels.raw_open);
        println!("\n| steps | sessions | {header} |");
        println!("|---|---|{}", "---|".repeat(header.split(" | ").count()));
        for r in rows {
            let cells: Vec<String> = cells.iter().map(|c| c(r)).collect();
            println!("| {} | {} | {} |", r.steps, r.sessions, cells.join(" | "));
        }
    }
}
