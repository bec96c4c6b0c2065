"""Submit -> feedback visible to the student, with the grading service running.

    python bench/serve_latency.py [--seconds 120] [--every 2] [--students 10] [--out bench/results]

A course folder (ch01) and an nbgrader exchange in a temporary folder; the
service runs as `python course.py serve` would (its own process, sandbox on,
the default engine). A submitter writes one submission every ``--every``
seconds for ``--seconds`` seconds, as nbgrader's submit leaves them (the
folder, timestamp.txt, submission_secret.txt), cycling through ``--students``
students and the chapter's catalogue (correct and wrong answers, so students
resubmit). A submission's latency is the time from its folder appearing to its
feedback page being where nbgrader's fetch_feedback looks for it
(``<exchange>/<course>/feedback/<hash>.html``): what the student's Assignments
tab fetches next. Prints and keeps p50, p95 and the maximum, with the load.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harness import grading_course, make_submission  # noqa: E402

from grading import protocol  # noqa: E402

CH = "ch01_attention"


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def submit(exchange: Path, student: str, nb) -> tuple[Path, str]:
    import nbformat
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")
    name = f"{student}+{CH}+{stamp}+{secrets.token_hex(4)}"
    dest = exchange / protocol.COURSE_ID / "inbound" / name   # in nbgrader submit's order: the notebook,
    dest.mkdir()                                               # the timestamp, the secret last
    nbformat.write(nb, dest / f"{CH}.ipynb")
    secret = secrets.token_hex(64)
    (dest / "timestamp.txt").write_text(stamp)
    (dest / "submission_secret.txt").write_text(secret)
    return dest, secret


def _superseded(root: Path) -> set[str]:
    """The inbound folders the service recorded as replaced by a newer one of their student."""
    try:
        lines = (root / ".grading" / "service" / "handled.jsonl").read_text().splitlines()
    except OSError:
        return set()
    return {json.loads(x)["name"] for x in lines if '"superseded"' in x}


def main() -> None:
    from nbgrader.utils import notebook_hash
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--every", type=float, default=2)
    ap.add_argument("--students", type=int, default=10)
    ap.add_argument("--settle", type=float, default=120, help="how long to wait for the last feedback")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    cat = importlib.import_module(f"catalogue.{CH}")
    pool = [None] + [v.replace for v in cat.BUGS[:6]] + [v.replace for v in cat.CORRECT[:3]]
    result = {"chapter": CH, "seconds": args.seconds, "every_s": args.every, "students": args.students,
              "cores": os.cpu_count(), "uptime_before": subprocess.run(["uptime"], capture_output=True,
                                                                      text=True).stdout.strip()}
    with tempfile.TemporaryDirectory() as tmp:
        root, exchange = Path(tmp) / "course", Path(tmp) / "exchange"
        rel, src = grading_course(root, CH)
        (exchange / protocol.COURSE_ID / "inbound").mkdir(parents=True)
        log = open(Path(tmp) / "serve.log", "w")
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        t_start = time.monotonic()
        service = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "serve", "--root", str(root),
                                    "--exchange", str(exchange), "--poll", "0.2"], cwd=root, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while "serve: watching" not in (Path(tmp) / "serve.log").read_text():
                if service.poll() is not None or time.monotonic() - t_start > 180:
                    raise SystemExit((Path(tmp) / "serve.log").read_text())
                time.sleep(0.1)
            result["service_start_s"] = round(time.monotonic() - t_start, 1)
            waiting: dict[Path, tuple[float, str]] = {}   # page -> (submitted at, inbound folder)
            latencies: list[float] = []
            t0 = time.monotonic()
            n = 0
            while True:
                now = time.monotonic()
                if now - t0 < args.seconds and now >= t0 + n * args.every:
                    student = f"student{n % args.students:02d}"
                    nb = make_submission(rel, src, pool[(n * 7 + n // args.students) % len(pool)])
                    folder, secret = submit(exchange, student, nb)
                    page = exchange / protocol.COURSE_ID / "feedback" / \
                        f"{notebook_hash(secret=secret, notebook_id=CH)}.html"
                    waiting[page] = (time.monotonic(), folder.name)
                    n += 1
                for page, (t_sub, _) in list(waiting.items()):
                    if page.exists():
                        latencies.append(time.monotonic() - t_sub)
                        del waiting[page]
                if now - t0 >= args.seconds and (not waiting or now - t0 > args.seconds + args.settle):
                    break
                if now - t0 >= args.seconds and waiting:   # a submission its student replaced before it was
                    done = _superseded(root)                 # graded gets no page of its own
                    waiting = {p: v for p, v in waiting.items() if v[1] not in done}
                time.sleep(0.05)
        finally:
            service.send_signal(signal.SIGTERM)
            try:
                service.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(service.pid, signal.SIGKILL)
            log.close()
        text = (Path(tmp) / "serve.log").read_text()
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "serve_latency.log").write_text(text)     # the service's own account, kept beside
        record = [json.loads(x) for x in (root / ".grading" / "service" / "handled.jsonl").read_text().splitlines()]
    superseded = [r["name"] for r in record if r.get("done") == "superseded"]
    result.update(submitted=n, feedback_seen=len(latencies), never_seen=len(waiting),
                  p50_s=round(percentile(latencies, 0.5), 2), p95_s=round(percentile(latencies, 0.95), 2),
                  max_s=round(max(latencies), 2) if latencies else None,
                  min_s=round(min(latencies), 2) if latencies else None,
                  superseded=len(superseded),
                  latencies_s=[round(x, 2) for x in latencies],
                  uptime_after=subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                  service_log_tail=text.splitlines()[-3:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_latency.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(json.dumps({k: v for k, v in result.items() if k != "latencies_s"}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
