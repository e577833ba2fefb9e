"""The end of a soak run (scripts/soak.py): the checks it must pass, the
tables it prints and the summary it writes as JSON."""
import http.client
import json
import signal
import subprocess

MiB = 1024 * 1024
# Resource bounds (why these: see scripts/soak.py's docstring).
RSS_GROWTH_RATIO = 1.25
RSS_GROWTH_SLACK = 16 * MiB
FD_THREAD_SLACK = 32


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds):
    return None if seconds is None else round(seconds * 1000, 1)


def latency(values):
    return {"n": len(values), "p50_ms": ms(percentile(values, 0.5)), "p99_ms": ms(percentile(values, 0.99)),
            "max_ms": ms(max(values) if values else None)}


def halves(rows, seconds):
    """The samples after the warm-up (20% of the run, at least 10 s), split
    into a first and a second half."""
    warm = max(10.0, 0.2 * seconds)
    steady = [r for r in rows if r["t"] >= warm]
    middle = len(steady) // 2
    return warm, steady[:middle], steady[middle:]


def healthz(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError as e:
        return str(e)


def stop_and_verify(server, orgs):
    """SIGTERM, then `cairn verify` of each org on the data directory:
    (exit code of serve, exit code of the first failing verify or 0, the
    verdicts)."""
    if not server.alive():
        return server.proc.returncode, None, "server was not running"
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        code = "hung on SIGTERM"
    verdicts, failed = [], 0
    for org in orgs:
        rc, out, err = server.cli("--org", org, "verify")
        verdicts.append(f"{org}: {(out + err).strip().splitlines()[-1][:200] if (out + err).strip() else rc}")
        failed = failed or rc
    return code, failed, "; ".join(verdicts)


def report(server, orgs, stats, rows, idle, settled, args, tail, hostile_answers, reconnects):
    """Prints the tables and the checks; returns the summary. orgs: the
    orgs' names; hostile_answers: the hostile operations and the answers
    each may get."""
    checks = []

    def check(name, passed, detail):
        checks.append({"check": name, "passed": bool(passed), "detail": detail})

    warm, first, second = halves(rows, args.seconds)
    split = second[0]["t"] if second else float("inf")
    good_ops = sorted(op for op in stats.count if op not in hostile_answers)
    hostile_ops = sorted(op for op in stats.count if op in hostile_answers)

    print("\nwell-behaved operations (latency of successful calls; halves after the warm-up)")
    print(f"{'operation':<18} {'calls':>7} {'errors':>6} {'retries':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
          f" {'p99 1st':>8} {'p99 2nd':>8}")
    per_op = {}
    for op in good_ops:
        samples = stats.samples[op]
        whole = latency([s for _, s in samples])
        early = latency([s for t, s in samples if warm <= t < split])
        late = latency([s for t, s in samples if t >= split])
        per_op[op] = {"calls": stats.count[op], "errors": stats.errors[op], "retries": stats.retries[op],
                      **whole, "p99_first_half_ms": early["p99_ms"], "p99_second_half_ms": late["p99_ms"]}
        v = per_op[op]
        print(f"{op:<18} {v['calls']:>7} {v['errors']:>6} {v['retries']:>7} {v['p50_ms'] or '-':>8} "
              f"{v['p99_ms'] or '-':>8} {v['max_ms'] or '-':>8} {early['p99_ms'] or '-':>8} {late['p99_ms'] or '-':>8}")

    print("\nhostile operations (answers received)")
    hostile = {}
    for op in hostile_ops:
        hostile[op] = {"calls": stats.count[op], "unexpected": stats.errors[op], "answers": dict(stats.outcomes[op])}
        answers = ", ".join(f"{k}: {n}" for k, n in sorted(stats.outcomes[op].items()))
        print(f"{op:<22} {stats.count[op]:>6}  {answers}")

    errors = {op: stats.examples[op] for op in good_ops if stats.errors[op]}
    for op, examples in errors.items():
        print(f"  {op} errors, first ones: {examples}")
    check("no error for well-behaved clients", not errors,
          f"{sum(stats.errors[op] for op in good_ops)} errors in {sum(stats.count[op] for op in good_ops)} calls")
    missing = [op for op in ("ingest_single", "ingest_batch", "ingest_bound", "replay", "sql", "export_partial",
                             "export_complete", "verify_org", "mcp_session") if stats.count[op] - stats.errors[op] == 0]
    check("every well-behaved operation ran", not missing, f"never succeeded: {missing}" if missing else "all ran")
    unexpected = {op: stats.examples[op] for op in hostile_ops if stats.errors[op]}
    for op, examples in unexpected.items():
        print(f"  {op} unexpected answers, first ones: {examples}")
    check("hostile clients got only their 4xx, 429 or 503", not unexpected,
          f"unexpected: {sorted(unexpected)}" if unexpected else f"{sum(stats.count[op] for op in hostile_ops)} requests")
    check("hostile clients ran", set(hostile_answers) <= set(hostile_ops), f"ran: {hostile_ops}")
    # The hoarder opens a session every 5 s and never closes one: past the
    # per-key limit (16) it must be refused.
    hoarded = stats.outcomes["mcp_hoarder"]
    if sum(hoarded.values()) > 16:
        check("MCP sessions per key bounded", hoarded.get("429", 0) > 0, f"hoarder answers: {dict(hoarded)}")
    check("the server lived through the load", server.alive() and len(rows) > 0,
          f"{len(rows)} samples" if server.alive() else f"exited {server.proc.returncode}")

    resources = {}
    if first and second:
        def top(half, key):
            return max(r[key] for r in half)
        rss_bound = top(first, "rss") * RSS_GROWTH_RATIO + RSS_GROWTH_SLACK
        resources = {
            "idle": {"rss": idle[0], "fds": idle[1], "threads": idle[2]},
            "start": {k: first[0][k] for k in ("t", "rss", "fds", "threads")},
            "end": {k: rows[-1][k] for k in ("t", "rss", "fds", "threads")},
            "first_half_max": {k: top(first, k) for k in ("rss", "fds", "threads")},
            "second_half_max": {k: top(second, k) for k in ("rss", "fds", "threads")},
            "after_load": settled, "warm_up_s": warm,
            "rss_slope_mib_per_hour": round(slope([(r["t"], r["rss"]) for r in first + second]) * 3600 / MiB, 1),
        }
        check("RSS flat", top(second, "rss") <= rss_bound,
              f"second half max {top(second, 'rss') / MiB:.1f} MiB <= {rss_bound / MiB:.1f} MiB "
              f"(first half max {top(first, 'rss') / MiB:.1f} MiB x {RSS_GROWTH_RATIO} + 16)")
        for key in ("fds", "threads"):
            check(f"{key} flat", top(second, key) <= top(first, key) + FD_THREAD_SLACK,
                  f"second half max {top(second, key)} <= first half max {top(first, key)} + {FD_THREAD_SLACK}")
        for key, at_idle in (("fds", idle[1]), ("threads", idle[2])):
            back = settled and settled[key] <= at_idle + FD_THREAD_SLACK
            check(f"{key} back after the load", back,
                  f"{settled and settled[key]} after the load <= {at_idle} idle + {FD_THREAD_SLACK}")
    else:
        check("enough samples after the warm-up", False, f"{len(rows)} samples; run longer than {warm:.0f} s")

    status = healthz(server.port) if server.alive() else "dead"
    check("alive at the end (/healthz)", status == 200, f"/healthz: {status}")
    code, verify_rc, verify_out = stop_and_verify(server, orgs)
    check("clean shutdown on SIGTERM", code == 0, f"exit {code}")
    check("cairn verify passes after shutdown, every org", verify_rc == 0, verify_out)

    print(f"\nresources: {json.dumps(resources)}")
    print(f"stale keep-alive connections reopened: {reconnects}")
    print("\nchecks")
    for c in checks:
        print(f"  {'PASS' if c['passed'] else 'FAIL'}  {c['check']}: {c['detail']}")
    passed = all(c["passed"] for c in checks)
    print("soak " + ("passed" if passed else "FAILED"), flush=True)
    return {"passed": passed, "seconds": args.seconds, "checks": checks, "resources": resources,
            "operations": per_op, "hostile": hostile, "errors": errors,
            "reconnects": reconnects, "last_interval": tail}


def slope(points):
    """Least-squares slope of (t, value) points, per second."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / den if den else 0.0
