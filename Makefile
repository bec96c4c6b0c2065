# The course's front door. Every target is a thin wrapper over `python3 course.py ...`,
# which also works without make (Windows: `py course.py ...`).
PY ?= python3

# LANG picks the build language (zh by default). The shell's own LANG (a locale such
# as en_US.UTF-8) is ignored: only `make source LANG=en` on the command line counts.
ifeq ($(origin LANG),command line)
COURSE_LANG := $(LANG)
else
COURSE_LANG := zh
endif
override LANG := C.UTF-8
export LANG

.PHONY: help env lab instructor-lab test test-system check source release dist site grade serve collect return bench bench-train

help:
	@$(PY) course.py help

env:      ## create .venv and install everything
	$(PY) course.py env

lab:      ## start JupyterLab on your own workspace (workspace/, copied from release/, never overwritten)
	$(PY) course.py lab

instructor-lab:  ## JupyterLab on the whole course folder (formgrader, Create Assignment)
	$(PY) course.py instructor-lab

test:     ## the test suite (all but the deployment's own tests)
	$(PY) course.py test

test-system:  ## the deployment's own tests: Dask clusters, JupyterHub, PostgreSQL, the service, the LMS, a fresh pack
	$(PY) course.py test --system

# make check CHAPTER=ch02_causal_mask [PARTS=visible,ledgers]
check:    ## everything to pass after editing one chapter: one line per part, then the failures' own messages
	$(PY) course.py check $(if $(CHAPTER),--chapter $(CHAPTER)) $(if $(PARTS),--parts $(PARTS))

source:   ## notebooks/ -> source/  (LANG=zh|en)
	$(PY) course.py source --lang $(COURSE_LANG)

release:  ## source/ -> release/
	$(PY) course.py release

dist:     ## the student packs, one zip per language, in dist/
	$(PY) course.py dist

# make site [CHAPTERS="ch01_attention ch04_positions"]
site:     ## the course as a static website in _site/ (zh at the root, en under en/)
	$(PY) course.py site $(CHAPTERS)

# make grade [CHAPTER=ch01_attention] [STUDENT=alice] [REGRADE=1]
grade:    ## autograde submitted/, feedback, grades.csv, class report
	$(PY) course.py grade $(if $(CHAPTER),--chapter $(CHAPTER)) $(if $(STUDENT),--student $(STUDENT)) $(if $(REGRADE),--regrade)

# make serve [ROOT=~instructor/transformer] [EXCHANGE=/srv/nbgrader/exchange]
serve:    ## the grading service: each submission graded as it lands in the exchange, its feedback released
	$(PY) course.py serve $(if $(ROOT),--root $(ROOT)) $(if $(EXCHANGE),--exchange $(EXCHANGE))

# make collect FROM="canvas.zip" [WORKSHEET="Grades.csv"] [LMS=canvas|moodle|plain] [TIMEZONE=Asia/Shanghai]
#              [CANVAS_URL=https://... CANVAS_COURSE=42]   (the token in the CANVAS_TOKEN environment variable)
collect:  ## file what an LMS gave you into submitted/ (FROM= archives or folders, oldest first)
	$(PY) course.py collect $(FROM) $(foreach w,$(WORKSHEET),--worksheet $(w)) $(if $(LMS),--lms $(LMS)) \
		$(if $(TIMEZONE),--timezone $(TIMEZONE)) $(CANVAS_ARGS)

# make return [CHAPTER=ch01_attention] [CANVAS_URL=... CANVAS_COURSE=42 [ASSIGNMENTS="ch01_attention=7"]] [SEND=1]
return:   ## hand back: Moodle's feedback archives; Canvas comments with page and score (a dry run unless SEND=1)
	$(PY) course.py return $(if $(CHAPTER),--chapter $(CHAPTER)) $(CANVAS_ARGS) $(if $(SEND),--send)

CANVAS_ARGS = $(if $(CANVAS_URL),--canvas-url $(CANVAS_URL)) $(if $(CANVAS_COURSE),--canvas-course $(CANVAS_COURSE)) \
	$(foreach a,$(ASSIGNMENTS),--assignment $(a))

bench:    ## the benchmarks; output kept under bench/results/
	$(PY) course.py bench

# make bench-train TEXT=path/to/text.txt SECONDS=92
bench-train:
	$(PY) course.py bench-train --text $(TEXT) --seconds $(or $(SECONDS),92)
