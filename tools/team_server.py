"""The team's MLflow server (docs/operations.md, "Team mode"): `python -m tools.team_server start|stop|status|env
[--folder .team] [--port 5001] [--detach]` (make mlflow-server).

PostgreSQL listens on a unix socket only (as the `postgres` user when run as root); MLflow runs its `basic-auth` app.
The admin's password, made once, is kept 0600 in <folder>/credentials and <folder>/auth.ini. Exit codes: 0 done,
1 not running (status), 2 bad input or a process that would not start, in one line.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from toksel.runtime.errors import ToksError
from toksel.runtime.paths import project_root
from toksel.ui import require_free


def postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")) or [shutil.which("pg_ctl")]
    if found[-1] is None:
        raise ToksError("no PostgreSQL (pg_ctl): `make postgres` installs it")
    return Path(found[-1]).parent


def _postgres(command: str, *args: str | Path) -> str:
    """A PostgreSQL program's output, run as the `postgres` user when we are root (PostgreSQL refuses root)."""
    as_owner = {}
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        as_owner = {"user": owner.pw_uid, "group": owner.pw_gid, "cwd": "/",
                    "extra_groups": os.getgrouplist("postgres", owner.pw_gid),
                    "env": {**os.environ, "HOME": owner.pw_dir, "USER": "postgres", "LOGNAME": "postgres"}}
    done = subprocess.run([str(postgres_bin() / command), *map(str, args)], capture_output=True, text=True,
                          **as_owner)
    if done.returncode:
        raise ToksError(f"{command} failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return done.stdout


def _private_file(path: Path, text: str) -> None:
    """Written readable by its owner alone, never for a moment by others."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(text)


def credentials(folder: Path) -> dict[str, str]:
    """The admin's login from <folder>/credentials, refused if others may read it."""
    path = folder / "credentials"
    if (mode := path.stat().st_mode & 0o777) & 0o077:
        raise ToksError(f"{path}: others may read it (mode {mode:o}): chmod 600 it")
    login = configparser.ConfigParser()
    login.read(path)
    if not login.has_option("mlflow", "mlflow_tracking_password"):
        raise ToksError(f"{path} is not a credentials file (no mlflow_tracking_password under [mlflow])")
    return {"username": login["mlflow"].get("mlflow_tracking_username", "admin"),
            "password": login["mlflow"]["mlflow_tracking_password"]}


def _start_postgres(folder: Path) -> tuple[Path, dict[str, str]]:
    """The cluster, made with the admin's password at the first start, running with its two databases."""
    if os.geteuid() == 0:  # the `postgres` user passes through to its cluster (search only; the secrets are 0600)
        folder.chmod(folder.stat().st_mode & 0o777 | 0o001)
    cluster = folder / "postgres"
    if not cluster.exists():
        cluster.mkdir(mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(cluster, "postgres")
        _postgres("initdb", "-D", cluster, "-U", "postgres", "--auth=trust")
        _private_file(folder / "credentials", "[mlflow]\nmlflow_tracking_username = admin\n"
                                              f"mlflow_tracking_password = {secrets.token_urlsafe(24)}\n")
    login = credentials(folder)  # refused before anything starts
    _postgres("pg_ctl", "-D", cluster, "-w", "-l", cluster / "server.log", "-o",
              f"-c listen_addresses='' -c unix_socket_directories='{cluster}'", "start")
    existing = _postgres("psql", "-h", cluster, "-U", "postgres", "-Atc", "SELECT datname FROM pg_database").split()
    for name in {"mlflow", "mlflow_auth"} - set(existing):  # the runs; the users and their permissions
        _postgres("psql", "-h", cluster, "-U", "postgres", "-c", f"CREATE DATABASE {name}")
    return cluster, login


def start(folder: Path, port: int, timeout: float = 90) -> dict:
    """PostgreSQL and the MLflow server, up and answering; recorded in <folder>/server.json."""
    require_free(port)
    folder.mkdir(parents=True, exist_ok=True)
    cluster, login = _start_postgres(folder)
    database = f"postgresql+psycopg2://postgres@/{{}}?host={cluster}"
    _private_file(folder / "auth.ini", f"[mlflow]\ndefault_permission = READ\n"
                                       f"database_uri = {database.format('mlflow_auth')}\n"
                                       f"admin_username = {login['username']}\nadmin_password = {login['password']}\n"
                                       "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    environment = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(folder / "auth.ini"),
                   "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
                   "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32)}  # CSRF's key: this run's, on no disk
    with open(folder / "mlflow.log", "ab") as log:
        server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth", "--workers",
                                   "1", "--backend-store-uri", database.format("mlflow"), "--artifacts-destination",
                                   str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port)],
                                  env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state = {"uri": f"http://127.0.0.1:{port}", "mlflow_pid": server.pid, "cluster": str(cluster)}
    (folder / "server.json").write_text(json.dumps(state))
    deadline = time.monotonic() + timeout
    while server.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{state['uri']}/health", timeout=2):
            return state
        time.sleep(0.5)
    stop(folder)
    raise ToksError(f"the MLflow server did not answer within {timeout:.0f} s: see {folder / 'mlflow.log'}")


def state_of(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "server.json").read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        raise ToksError(f"{folder / 'server.json'} is damaged: stop the processes by hand, then remove it") from None


def stop(folder: Path) -> None:
    """The MLflow server (its process group), then PostgreSQL; the record removed."""
    if (state := state_of(folder)) is None:
        raise ToksError(f"no team server recorded in {folder}: start it first")
    with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
        os.killpg(state["mlflow_pid"], signal.SIGTERM)
        psutil.Process(state["mlflow_pid"]).wait(timeout=30)
    _postgres("pg_ctl", "-D", state["cluster"], "-w", "-m", "fast", "stop")
    (folder / "server.json").unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.team_server", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("start", "stop", "status", "env"))
    parser.add_argument("--folder", type=Path, default=project_root() / ".team")
    parser.add_argument("--port", type=int, default=5001)
    parser.add_argument("--detach", action="store_true", help="start: return once it answers; `stop` ends it")
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            state = start(args.folder, args.port)
            print(f"team_server: {state['uri']} (login: `eval \"$(python -m tools.team_server env)\"`)", flush=True)
            if not args.detach:
                with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops both
                    psutil.Process(state["mlflow_pid"]).wait()
                stop(args.folder)
        elif args.command == "stop":
            stop(args.folder)
        elif args.command == "status":
            running = (state := state_of(args.folder)) is not None and psutil.pid_exists(state["mlflow_pid"])
            print(f"team_server: {state['uri'] if running else 'not running'}")
            return 0 if running else 1
        elif (state := state_of(args.folder)) is None:
            raise ToksError(f"no team server recorded in {args.folder}: start it first")
        else:
            login = credentials(args.folder)
            print(f"export MLFLOW_TRACKING_URI={state['uri']}\nexport MLFLOW_TRACKING_USERNAME={login['username']}\n"
                  f"export MLFLOW_TRACKING_PASSWORD={login['password']}")
    except ToksError as error:
        print(f"team_server: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
