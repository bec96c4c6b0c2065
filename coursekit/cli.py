"""The course's commands (run inside the environment; see course.py)."""
from __future__ import annotations

import argparse
import sys

from . import build, dist, release


def cmd_source(args) -> int:
    names = args.chapters or build.chapters()
    for ch in names:
        path = build.write_source(ch, args.lang)
        print(f"source: {path.relative_to(build.ROOT)} ({args.lang})")
    return 0


def cmd_release(args) -> int:
    names = args.chapters or build.chapters()
    for path in release.generate_releases(names):
        print(f"release: {path.relative_to(build.ROOT)}")
    return 0


def cmd_dist(args) -> int:
    for lang in args.langs or build.LANGS:
        path = dist.make_pack(lang)
        print(f"student pack: {path.relative_to(build.ROOT)}")
    return 0


def cmd_grade(args) -> int:
    from . import grade
    if args.check:
        grade.check(root=args.root or build.ROOT, chapter=args.chapter, sandbox=not args.unsandboxed)
        return 0
    jobs = grade.grade(root=args.root or build.ROOT, chapter=args.chapter, student=args.student, jobs=args.jobs,
                       sandbox=not args.unsandboxed, timeout=args.timeout, regrade=args.regrade)
    return 0 if all(j.ok for j in jobs) else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="course", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("source", help="build source/ from notebooks/")
    s.add_argument("chapters", nargs="*")
    s.add_argument("--lang", default=build.DEFAULT_LANG, choices=build.LANGS)
    s.set_defaults(fn=cmd_source)
    r = sub.add_parser("release", help="regenerate release/ from source/")
    r.add_argument("chapters", nargs="*")
    r.set_defaults(fn=cmd_release)
    d = sub.add_parser("dist", help="build the student packs (one zip per language) in dist/")
    d.add_argument("langs", nargs="*", choices=[[], *build.LANGS])
    d.set_defaults(fn=cmd_dist)
    g = sub.add_parser("grade", help="grade everything under submitted/ (autograde, feedback, grades.csv, report)")
    g.add_argument("--chapter", help="only this chapter, e.g. ch01_attention")
    g.add_argument("--student", help="only this student")
    g.add_argument("--jobs", type=int, help="parallel workers (default: number of cores)")
    g.add_argument("--timeout", type=int, default=600, help="time limit per notebook in seconds")
    g.add_argument("--root", help="the course folder to grade (default: this one), e.g. an instructor's "
                                  "course folder on JupyterHub")
    g.add_argument("--unsandboxed", action="store_true",
                   help="grade without bubblewrap (submissions then run with your rights)")
    g.add_argument("--regrade", action="store_true",
                   help="grade every notebook again, even those unchanged since they were graded")
    g.add_argument("--check", action="store_true",
                   help="only the preflight: start one graded kernel per chapter, write nothing")
    g.set_defaults(fn=cmd_grade)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except build.BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
