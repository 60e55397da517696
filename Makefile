# toksel: `make repro` runs the pipeline, `make test` runs the tests. Both create .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DVC_NO_ANALYTICS := 1
# DVC stages call `python`: make it the project's.
export PATH := $(CURDIR)/$(BIN):$(PATH)
UI_PORT ?= 5000
TEAM_PORT ?= 5001

.PHONY: test-slow test-docs install repro quick paper experiments claims-diff plots-diff test lint ui check-ui bench chromium postgres mlflow-server check-report

install: $(STAMP)

# Reinstall when the dependency pins change.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m tools.plots_diff --fetch
	@touch $(STAMP)

# REPRO_FLAGS: e.g. --pull --allow-missing, to take what a DVC remote already holds instead of recomputing it. With
# --pull, every output dvc.lock names is pulled first: DVC's own --pull fetches a missing input by its path, which
# must be an output, and a stage that reads a folder of several stages' outputs (the report reads results/train)
# would stop there. A remote that does not answer is a warning: the stages then run.
# A dvc.lock that a kill cut while DVC wrote it is mended first (tools/heal_lock.py), or DVC would refuse to start.
# Ctrl-C: DVC calls the stopped stage failed (exit code 255, its ERROR line); the shell says what happened instead,
# once DVC has ended, and exits 130, as a program stopped by Ctrl-C does.
STOPPED = trap 'echo "make $@: stopped by Ctrl-C; the stages that had finished are kept, and make $@ goes on from them" >&2; exit 130' INT;
repro: $(STAMP)
	$(BIN)/python -m tools.heal_lock
	@case " $(REPRO_FLAGS) " in *" --pull "*) $(BIN)/dvc pull --allow-missing \
	  || echo "make repro: dvc pull failed (above): the stages whose outputs it lacks run instead" >&2;; esac
	@$(STOPPED) $(BIN)/dvc repro $(REPRO_FLAGS)

# The whole DAG small (about 12 minutes on 2 cores, 746 s as last measured): profiles/quick.yaml's values as a DVC experiment run in a copy of the project
# (tools/profile.py; `dvc exp run --temp`), so the workspace's params.yaml and results stay as they were; the real
# datasets from $TOKSEL_DATA_MIRROR or the Hub, else the synthetic ones only. It says where its results are.
quick: $(STAMP)
	$(BIN)/python -m tools.heal_lock
	@$(STOPPED) $(BIN)/python -m tools.profile quick $(REPRO_FLAGS)

# The paper's sizes on a machine with a GPU (profiles/paper.yaml: the ablations at d 2048 on whole reviews, five
# seeds), as quick runs its profile; docs/scale.md says what it costs and benchmarks/gpu.sh measures it.
paper: $(STAMP)
	$(BIN)/python -m tools.heal_lock
	@$(STOPPED) $(BIN)/python -m tools.profile paper $(REPRO_FLAGS)

# The experiments side by side: a row per parameter or verdict count that differs between them (not against the
# baseline's full values, as `dvc exp show --only-changed` does), a column per experiment. EXP_FLAGS: dvc exp show's
# own options, e.g. --rev <commit> for the experiments of another baseline.
experiments: $(STAMP)
	$(BIN)/python -m toksel.experiments_table $(EXP_FLAGS)

# The claims whose verdict or value moved between two runs (DVC experiment names, commits; `workspace`): OLD
# defaults to HEAD, NEW to the workspace. `make claims-diff OLD=quick-20261127-142347 NEW=eta0-50`.
OLD ?= HEAD
NEW ?= workspace
claims-diff: $(STAMP)
	$(BIN)/python -m toksel.claims_diff $(OLD) $(NEW)

# The plots whose data moved between the same two (dvc_plots/index.html; the Vega scripts inline, fetched once from
# the npm registry, so that the page renders offline); the unchanged ones listed by name (tools/plots_diff.py).
plots-diff: $(STAMP)
	$(BIN)/python -m tools.plots_diff $(OLD) $(filter-out workspace,$(NEW))

# The tests but the slow ones (marked `slow`: the DVC end-to-end runs, the controls' tiny pipeline, tests of 30 s
# or more: the UI in Chromium, the team server, a Dask cluster, two DDP processes, a kill mid-fit), which
# `make test-slow` runs; CI runs both. Two workers, one test file each at a time, handed out in collection order
# (the longest files first: tests/conftest.py) so that neither worker ends the run alone.
# Chromium and PostgreSQL are installed when they can be (root or sudo); without them the report's render test
# and the team server's test are skipped.
PYTEST = $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	@$(MAKE) --no-print-directory chromium || echo "no Chromium: the report's render test will be skipped"
	@$(MAKE) --no-print-directory postgres || echo "no PostgreSQL: the team server's test will be skipped"
	$(BIN)/ruff check src pipelines tests benchmarks tools
	$(BIN)/lint-imports --no-cache
	$(PYTEST) -m "not slow and not docs"

test-slow: $(STAMP)
	@$(MAKE) --no-print-directory chromium || echo "no Chromium: the UI's test will be skipped"
	@$(MAKE) --no-print-directory postgres || echo "no PostgreSQL: the team server's test will be skipped"
	$(PYTEST) -m slow

# Every `dvc exp run -S ...` that README.md and docs/ show, as an experiment of the quick profile, in a clone that
# shares this project's DVC cache: after `make quick`, each reruns only the stages its values reach (CI runs it then).
# Two at a time, each worker in a clone of its own: most of a variant is DVC's own work, one core's.
test-docs: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist load --durations=0 -m docs tests/test_documented_commands.py

lint: $(STAMP)
	$(BIN)/ruff check src pipelines tests benchmarks tools
	$(BIN)/lint-imports --no-cache

# Headless Chromium (Debian package; root or sudo), for the report's render check and its test.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium; }

# PostgreSQL (Debian package; root or sudo), the store of the team's MLflow server. Its binaries are not on PATH:
# Debian keeps them in /usr/lib/postgresql/<version>/bin.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends postgresql; }

# The team's MLflow server (http://127.0.0.1:$(TEAM_PORT)) on PostgreSQL, artifacts on local disk, all under .team/;
# it asks for a login (the admin's in .team/credentials; `eval "$(python -m tools.team_server env)"` in the shell
# that logs to it). In the foreground: Ctrl-C stops both.
mlflow-server: $(STAMP) postgres
	$(BIN)/python -m tools.team_server start --port $(TEAM_PORT)

# The report (make repro) opens in headless Chromium with every figure loaded.
check-report: $(STAMP) chromium
	$(BIN)/python -m toksel.report.render_check results/report/report.html

# Every benchmark on full IMDB, written to benchmarks/results.md (needs `dvc repro one_step@imdb`, i.e. the data
# mirror or the Hub, and the stages' metrics for the peak-memory table); about 24 minutes here.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

# The MLflow UI on the project's store (one worker keeps it light); it prints the address of the toksel
# experiment's runs table. check-ui opens that page and a run's metric chart in headless Chromium through the UI's
# test (screenshots: mlflow-ui.png, mlflow-ui-chart.png).
ui: $(STAMP)
	$(BIN)/python -m toksel.ui --port $(UI_PORT)

check-ui: $(STAMP)
	TOKSEL_UI_SCREENSHOTS=$(CURDIR) $(BIN)/python -m pytest -q tests/test_ui.py
