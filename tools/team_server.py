"""Team mode: an MLflow tracking server on PostgreSQL, with artifacts on local disk, both started and stopped here.

    python -m tools.team_server start [--folder .team] [--port 5001] [--postgres-port 5433] [--detach]
    python -m tools.team_server status|stop|env [--folder .team]

PostgreSQL is started and stopped by its own `pg_ctl` (`-w`: it returns once the server accepts connections, or
has shut down), the MLflow server by `mlflow server`; this module adds the cluster's first set-up, the role and
database, a fresh password per start, and one record of both processes. An operations tool, outside the
research package and its layers.

The embedded SQLite store suits one person; a team shares one server. Everything lives under one folder
(default `.team/` in the project root, ignored by git and DVC):

    <folder>/postgres/      the database cluster (initdb on first start); its unix socket lives here too
    <folder>/postgres.log   PostgreSQL's output
    <folder>/artifacts/     the artifacts, which clients upload through the server (`mlflow-artifacts:/`)
    <folder>/mlflow.log     the MLflow server's output
    <folder>/server.json    the URI and both processes (PID and start time), for `status` and `stop`
    <folder>/credentials    the admin's user name and password (mode 0600), made at the first start
    <folder>/auth.ini       MLflow's authentication settings (no secret in it), written at every start

PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` system user (which Debian's
package creates) and the database runs as that user; otherwise everything runs as the caller. PostgreSQL
listens on 127.0.0.1 only; the MLflow server logs in as the role `mlflow` with a password that is made afresh
at every start and handed over in its environment (never on a command line, never on disk).

The MLflow server is MLflow's own `basic-auth` app: every request but /health must carry a user name and
password (HTTP basic authentication), or it is refused with 401. Its users live in a second database,
`mlflow_auth`. The admin's password is generated at the first start and kept in <folder>/credentials, in the
format of MLflow's own credentials file, readable by its owner only; `env` prints the three variables a client
needs (`eval "$(python -m tools.team_server env)"`). That file is the truth: a start whose admin cannot log in
with it (the file was deleted and made anew, or the password was changed through the API) sets the admin's
password to the file's. Other users: the admin creates them through MLflow (its /signup page or
`mlflow.server.auth.client.AuthServiceClient`); each logged-in user may read every experiment.

`start` stays in the foreground and stops both on Ctrl-C or SIGTERM; `start --detach` returns once both
answer and leaves them running until `stop`. Exit codes: 0 done, 1 a process failed to start or to stop,
2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import base64
import configparser
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from toksel.runtime.errors import ToksError
from toksel.runtime.paths import project_root
from toksel.runtime.processes import Process

DEFAULT_PORT = 5001  # `make ui` serves the embedded store on 5000
DEFAULT_POSTGRES_PORT = 5433  # beside, not on, the 5432 of a system-wide PostgreSQL
DATABASE = "mlflow"
AUTH_DATABASE = "mlflow_auth"  # the users and their permissions, beside the runs
ROLE = "mlflow"
ADMIN = "admin"
CREDENTIALS_FILE = "credentials"
AUTH_CONFIG_FILE = "auth.ini"
SERVICE_USER = "postgres"  # who owns and runs the cluster when we are root
STATE_FILE = "server.json"
POSTGRES_BINARIES = ("initdb", "pg_ctl", "psql")


class TeamServerError(RuntimeError):
    """A process did not start, or did not stop, in time; the message carries the tail of its log."""


@dataclass(frozen=True)
class TeamServer:
    """What `start` leaves running, as recorded in <folder>/server.json."""

    folder: str
    tracking_uri: str
    port: int
    postgres_port: int
    postgres: Process
    mlflow: Process

    def running(self) -> bool:
        return self.postgres.running() and self.mlflow.running()


@dataclass(frozen=True)
class PostgresBinaries:
    initdb: Path
    pg_ctl: Path
    psql: Path


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str

    def header(self) -> str:
        """The value of an HTTP Authorization header (basic authentication)."""
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def admin_credentials(folder: Path) -> Credentials:
    """The admin's login from <folder>/credentials; the file is made, with a new password, if there is none."""
    path = folder / CREDENTIALS_FILE
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        text = (f"[mlflow]\nmlflow_tracking_username = {ADMIN}\n"
                f"mlflow_tracking_password = {secrets.token_urlsafe(24)}\n")
        # O_EXCL with mode 0600: the password is never readable by others, not even for a moment.
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
            handle.write(text)
    return read_credentials(path)


def read_credentials(path: Path) -> Credentials:
    """A credentials file in MLflow's format, refused when others may read it."""
    if not path.is_file():
        raise ToksError(f"no credentials file {path}: the next start makes one")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ToksError(f"{path} holds the admin's password but others may read it (mode {mode:o}): "
                        f"`chmod 600 {path}`, and choose a new password (delete the file) if it may have leaked")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
        section = parser["mlflow"]
        username, password = section["mlflow_tracking_username"], section["mlflow_tracking_password"]
    except (configparser.Error, KeyError, UnicodeDecodeError) as error:
        raise ToksError(f"{path} is not a credentials file ([mlflow] with mlflow_tracking_username and "
                        f"mlflow_tracking_password; {type(error).__name__}): delete it, the next start makes "
                        "a new one") from None
    if not username or len(password) < 12:
        raise ToksError(f"{path}: MLflow wants a user name and a password of at least 12 characters")
    return Credentials(username, password)


def default_folder() -> Path:
    return project_root() / ".team"


def _version_key(bin_dir: Path) -> tuple[int, ...]:
    """/usr/lib/postgresql/15/bin -> (15,): the newest installed major version wins."""
    return tuple(int(part) for part in re.findall(r"\d+", bin_dir.parent.name)) or (0,)


def _candidate_dirs() -> Iterator[Path]:
    yield from sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for name in POSTGRES_BINARIES:  # a PATH entry may be a link into the real folder (/usr/local/bin/postgres)
        if found := shutil.which(name):
            yield Path(found).resolve().parent


def find_postgres() -> PostgresBinaries:
    """initdb, pg_ctl and psql of one installation: Debian's folders first, then PATH."""
    for bin_dir in _candidate_dirs():
        paths = [bin_dir / name for name in POSTGRES_BINARIES]
        if all(path.is_file() and os.access(path, os.X_OK) for path in paths):
            return PostgresBinaries(*paths)
    raise ToksError("PostgreSQL not found (initdb, pg_ctl and psql under /usr/lib/postgresql/*/bin or on PATH): "
                    "run `make postgres` (Debian package postgresql; root or sudo)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now (the kernel picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _check_port_free(port: int, what: str) -> None:
    """Nobody listens on `port`; SO_REUSEADDR as in the servers: a recent run's connections in TIME_WAIT don't count."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise ToksError(f"{what} port {port} on 127.0.0.1 is taken ({error.strerror}): choose another") from None


class _RunAs:
    """Runs PostgreSQL's programs as the cluster's owner: the `postgres` user when we are root, else ourselves."""

    def __init__(self) -> None:
        self.switch = os.geteuid() == 0
        if not self.switch:
            return
        try:
            self.account = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            raise ToksError(f"PostgreSQL refuses to run as root and there is no `{SERVICE_USER}` user to run it as: "
                            "run `make postgres` (Debian's package creates it) or start this as another user") from None

    def chown(self, path: Path) -> None:
        if self.switch:
            os.chown(path, self.account.pw_uid, self.account.pw_gid)

    def kwargs(self) -> dict:
        """Keyword arguments for subprocess: the user to become, and a HOME that user may read."""
        if not self.switch:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid,
                "extra_groups": os.getgrouplist(SERVICE_USER, self.account.pw_gid),
                "env": {**os.environ, "HOME": self.account.pw_dir, "USER": SERVICE_USER, "LOGNAME": SERVICE_USER}}

    def can_write(self, folder: Path) -> bool:
        """Whether the owner can reach and write `folder`: each parent needs search permission for that user."""
        if not self.switch:
            return os.access(folder, os.W_OK | os.X_OK)
        test = shutil.which("test") or "/usr/bin/test"
        return subprocess.run([test, "-w", str(folder)], cwd="/", **self.kwargs()).returncode == 0


def _log_tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return f"(no {path.name})"
    text = path.read_text(errors="replace").strip().splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in text) or f"  ({path.name} is empty)"


def _run(command: list[str], run_as: _RunAs, what: str, stdin: str | None = None) -> None:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, cwd="/", **run_as.kwargs())
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()
        raise TeamServerError(f"{what} failed (exit {done.returncode}): {output}")


def _init_cluster(binaries: PostgresBinaries, cluster: Path, run_as: _RunAs) -> None:
    """A new cluster (once): peer authentication on the unix socket, passwords (SCRAM) over TCP."""
    if (cluster / "PG_VERSION").exists():
        return
    cluster.mkdir(parents=True, exist_ok=True)
    cluster.chmod(0o700)
    run_as.chown(cluster)
    if not run_as.can_write(cluster):
        raise ToksError(f"the `{SERVICE_USER}` user cannot reach {cluster}: give every folder above it search "
                        "permission (chmod o+x) or choose a --folder outside private folders such as /root")
    _run([str(binaries.initdb), "-D", str(cluster), "--encoding=UTF8", "--no-locale", "--auth-local=peer",
          "--auth-host=scram-sha-256"], run_as, "initdb")


def _launch(command: list[str], log: Path, wait_until_ready: Callable[[subprocess.Popen], None],
            stop_signal: signal.Signals, **popen: Any) -> subprocess.Popen:
    """Start `command` with its output appended to `log`, wait until it is ready, and stop it again if it never
    gets there. A session of its own: Ctrl-C on the terminal reaches us, and we stop both servers in order."""
    with log.open("ab") as output:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True, **popen)
    try:
        wait_until_ready(process)
    except BaseException:
        _stop_child(process, stop_signal)
        raise
    return process


def _start_postgres(binaries: PostgresBinaries, cluster: Path, port: int, log: Path, run_as: _RunAs,
                    timeout: float) -> Process:
    """`pg_ctl start -w`: on loopback only, its unix socket in the cluster folder; returns the postmaster."""
    log.touch()
    run_as.chown(log)  # pg_ctl opens it as the cluster's owner
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={cluster}"
    try:
        _run([str(binaries.pg_ctl), "start", "-D", str(cluster), "-l", str(log), "-w", "-t", str(int(timeout)),
              "-o", options], run_as, "pg_ctl start")
    except TeamServerError as error:
        raise TeamServerError(f"{error}; {log}:\n{_log_tail(log)}") from None
    return Process.of(int((cluster / "postmaster.pid").read_text().split()[0]))


def _stop_postgres(cluster: Path, timeout: float) -> None:
    """`pg_ctl stop -m fast -w`: disconnect the clients, shut down cleanly, return once it is down."""
    _run([str(find_postgres().pg_ctl), "stop", "-D", str(cluster), "-m", "fast", "-w", "-t", str(int(timeout))],
         _RunAs(), "pg_ctl stop")


def _prepare_database(binaries: PostgresBinaries, cluster: Path, port: int, run_as: _RunAs) -> str:
    """The role and the databases of the runs and of the users (created once), and a new password for the role;
    returns it."""
    password = secrets.token_hex(24)  # hex: nothing to quote in SQL
    script = "\n".join([
        f"SELECT 'CREATE ROLE {ROLE} LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') \\gexec",
        f"ALTER ROLE {ROLE} PASSWORD '{password}';",
        *(f"SELECT 'CREATE DATABASE {database} OWNER {ROLE}' "
          f"WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{database}') \\gexec"
          for database in (DATABASE, AUTH_DATABASE)),
    ])
    # Over the unix socket in the cluster folder (peer authentication: the OS user is the superuser);
    # the script on stdin keeps the password off every command line.
    _run([str(binaries.psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(cluster), "-p", str(port),
          "-d", "postgres", "-f", "-"], run_as, "creating the mlflow role and database", stdin=script)
    return password


def _wait_for_mlflow(port: int, process: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise TeamServerError(f"the MLflow server exited at start (exit {process.returncode}); "
                                  f"{log}:\n{_log_tail(log)}")
        with suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.25)
    raise TeamServerError(f"the MLflow server did not answer on port {port} within {timeout:.0f} s; "
                          f"{log}:\n{_log_tail(log)}")


def _database_uri(postgres_port: int, database: str) -> str:
    """Without the password: libpq takes it from PGPASSWORD."""
    return f"postgresql+psycopg2://{ROLE}@127.0.0.1:{postgres_port}/{database}"


def _write_auth_config(folder: Path, postgres_port: int) -> Path:
    """MLflow's authentication settings: users in their own database, each logged-in user may read every run."""
    path = folder / AUTH_CONFIG_FILE
    path.write_text("[mlflow]\n"
                    "default_permission = READ\n"
                    f"database_uri = {_database_uri(postgres_port, AUTH_DATABASE)}\n"
                    f"admin_username = {ADMIN}\n"
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                    # A password is checked by a slow hash on every request unless a success is remembered; with
                    # one worker, a change through the API takes effect at once all the same.
                    "auth_cache_ttl_seconds = 300\n")
    return path


def _start_mlflow(folder: Path, port: int, postgres_port: int, password: str, admin: Credentials,
                  timeout: float) -> subprocess.Popen:
    command = [sys.executable, "-m", "mlflow", "server", "--app-name", "basic-auth",
               "--backend-store-uri", _database_uri(postgres_port, DATABASE),
               "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1"]
    # One worker and no job runner: 2 processes and about 490 MB instead of the defaults' 14 and 2.8 GB.
    # Secrets go in the environment, which `ps` does not show: libpq reads PGPASSWORD; the admin's password
    # is used once, when the users' database has no admin yet; the key signs the sign-up form's CSRF token.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PGPASSWORD": password,
           "MLFLOW_AUTH_CONFIG_PATH": str(_write_auth_config(folder, postgres_port)),
           "MLFLOW_AUTH_ADMIN_USERNAME": admin.username, "MLFLOW_AUTH_ADMIN_PASSWORD": admin.password,
           "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32)}
    log = folder / "mlflow.log"
    return _launch(command, log, lambda process: _wait_for_mlflow(port, process, log, timeout), signal.SIGTERM,
                   env=env)


def login_works(tracking_uri: str, credentials: Credentials) -> bool:
    """Whether the server takes `credentials`: it answers who the user is, or refuses with 401."""
    request = urllib.request.Request(f"{tracking_uri}/api/2.0/mlflow/users/get?username={credentials.username}",
                                     headers={"Authorization": credentials.header()})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status == 200
    except urllib.error.HTTPError as error:
        if error.code == 401:
            return False
        raise TeamServerError(f"the MLflow server answered a login with HTTP {error.code}: {error.reason}") from None


def _make_admin_login(tracking_uri: str, postgres_port: int, password: str, admin: Credentials) -> None:
    """Give the admin the password of the credentials file if the server does not take it (the file was made
    anew, or the password changed through the API): the file is the truth."""
    if login_works(tracking_uri, admin):
        return
    from mlflow.server.auth.sqlalchemy_store import SqlAlchemyStore  # 3 s of importing, only on this rare path

    users = SqlAlchemyStore()
    # The role's password in the URI, in this process only (SQLAlchemy hides it when it prints the URI).
    users.init_db(_database_uri(postgres_port, AUTH_DATABASE).replace(f"{ROLE}@", f"{ROLE}:{password}@"))
    try:
        users.update_user(admin.username, password=admin.password, is_admin=True)
    finally:
        users.engine.dispose()
    if not login_works(tracking_uri, admin):
        raise TeamServerError("the MLflow server refuses the admin's login even after its password was set")


def read_state(folder: Path) -> TeamServer | None:
    """What the last `start` in `folder` recorded, or None."""
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        return TeamServer(**{**data, "postgres": Process(**data["postgres"]), "mlflow": Process(**data["mlflow"])})
    except (ValueError, TypeError, KeyError) as error:
        raise ToksError(f"{path} is not a server record ({error}): stop the processes by hand, then delete "
                        "the file") from None


def start(folder: Path | None = None, port: int = DEFAULT_PORT, postgres_port: int = DEFAULT_POSTGRES_PORT,
          timeout: float = 120) -> TeamServer:
    """Start PostgreSQL, then the MLflow server on it; return once the server answers. A failure stops both."""
    folder = (folder or default_folder()).resolve()
    for number, what in (port, "MLflow"), (postgres_port, "PostgreSQL"):
        if not 0 < number < 65536:
            raise ToksError(f"{what} port {number} is not a TCP port (1-65535)")
    if port == postgres_port:
        raise ToksError(f"the MLflow server and PostgreSQL need two ports, both are {port}")
    admin = admin_credentials(folder)
    binaries = find_postgres()
    run_as = _RunAs()
    previous = read_state(folder)
    if previous is not None and (previous.postgres.running() or previous.mlflow.running()):
        raise ToksError(f"a team server already runs from {folder} ({previous.tracking_uri}, PIDs "
                        f"{previous.postgres.pid} and {previous.mlflow.pid}): stop it first")
    _check_port_free(port, "MLflow")
    _check_port_free(postgres_port, "PostgreSQL")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "artifacts").mkdir(exist_ok=True)
    cluster = folder / "postgres"
    _init_cluster(binaries, cluster, run_as)
    postgres_process = _start_postgres(binaries, cluster, postgres_port, folder / "postgres.log", run_as, timeout)
    tracking_uri = f"http://127.0.0.1:{port}"
    try:
        password = _prepare_database(binaries, cluster, postgres_port, run_as)
        mlflow = _start_mlflow(folder, port, postgres_port, password, admin, timeout)
    except BaseException:
        _stop_postgres(cluster, 30)
        raise
    server = TeamServer(str(folder), tracking_uri, port, postgres_port, postgres_process, Process.of(mlflow.pid))
    try:
        _make_admin_login(tracking_uri, postgres_port, password, admin)
    except BaseException:
        stop(server)
        raise
    (folder / STATE_FILE).write_text(json.dumps(asdict(server), indent=2) + "\n")
    return server


def _gone(process: psutil.Process) -> bool:
    """Exited. A zombie that is our own child is reaped here, so that its PID is freed; one that is not counts as
    gone (its parent, or init, reaps it)."""
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            try:
                # (0, 0) while the zombie's other threads still exit: the kernel reaps a thread group as one.
                return os.waitpid(process.pid, os.WNOHANG) != (0, 0)
            except ChildProcessError:
                return True
        return not process.is_running()
    except psutil.NoSuchProcess:
        return True


def _wait_gone(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of `processes` still alive after up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [process for process in processes if not _gone(process)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def _stop(process: Process, first_signal: signal.Signals, timeout: float) -> bool:
    """`first_signal`, up to `timeout` s to exit, then SIGKILL to it and to what it started. True once it is gone."""
    if not process.running():
        return True
    try:
        target = psutil.Process(process.pid)
        family = [target, *target.children(recursive=True)]  # the MLflow server's worker, PostgreSQL's backends
        target.send_signal(first_signal)
    except psutil.NoSuchProcess:
        return True
    for straggler in _wait_gone(family, timeout):
        with suppress(psutil.Error):
            straggler.kill()
    _wait_gone(family, 5)
    return not process.running()


def _stop_child(child: subprocess.Popen, first_signal: signal.Signals) -> None:
    """Clean up after a start that failed half-way."""
    if child.poll() is None:
        _stop(Process.of(child.pid), first_signal, 30)


def stop(server: TeamServer, timeout: float = 30) -> None:
    """Stop the MLflow server (SIGTERM to its PID), then PostgreSQL (`pg_ctl stop`)."""
    if not _stop(server.mlflow, signal.SIGTERM, timeout):
        raise TeamServerError(f"could not stop the MLflow server (PID {server.mlflow.pid}), even with SIGKILL")
    if server.postgres.running():
        _stop_postgres(Path(server.folder) / "postgres", timeout)
    with suppress(FileNotFoundError):
        (Path(server.folder) / STATE_FILE).unlink()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait_in_foreground(server: TeamServer) -> int:
    """Until Ctrl-C, SIGTERM or SIGHUP (then stop both, exit 0), or until one of them dies (stop the other, 1)."""
    try:
        while server.running():
            time.sleep(0.5)
        print(f"team_server: {'MLflow' if server.postgres.running() else 'PostgreSQL'} is gone; stopping the "
              f"other (logs in {server.folder})", file=sys.stderr)
        stop(server)
        return 1
    except KeyboardInterrupt:
        print("\nteam_server: stopping the MLflow server and PostgreSQL ...", flush=True)
        stop(server)
        print("team_server: stopped")
        return 0


def _folder_option(folder: Path) -> str:
    return "" if folder == default_folder().resolve() else f" --folder {shlex.quote(str(folder))}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.team_server", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop", "status", "env"),
                        help="env: print the variables a client needs, for eval")
    parser.add_argument("--folder", type=Path, default=None,
                        help="cluster, artifacts, logs and PIDs (default: .team in the project root)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"MLflow server port (default {DEFAULT_PORT})")
    parser.add_argument("--postgres-port", type=int, default=DEFAULT_POSTGRES_PORT,
                        help=f"PostgreSQL port on 127.0.0.1 (default {DEFAULT_POSTGRES_PORT})")
    parser.add_argument("--timeout", type=float, default=120, help="seconds each process may take to start")
    parser.add_argument("--detach", action="store_true", help="start: return once both answer and leave them running")
    args = parser.parse_args(argv)
    folder = (args.folder or default_folder()).resolve()
    try:
        if args.action == "start":
            if not args.detach:  # Ctrl-C, SIGTERM and SIGHUP stop both, also while they start (SIGINT explicitly:
                for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # Python leaves it ignored if inherited so)
                    signal.signal(each, _interrupt)
            server = start(folder, args.port, args.postgres_port, args.timeout)
            print(f"team_server: MLflow on PostgreSQL at {server.tracking_uri} (PIDs: MLflow {server.mlflow.pid}, "
                  f"PostgreSQL {server.postgres.pid} on port {server.postgres_port}; files in {folder})\n"
                  f"  it asks for a login: the admin's is in {folder / CREDENTIALS_FILE} (mode 0600)\n"
                  f"  in a shell that logs to it: eval \"$(python -m tools.team_server env{_folder_option(folder)})\"",
                  flush=True)
            if args.detach:
                print(f"  stop it with: python -m tools.team_server stop --folder {folder}")
                return 0
            print("  Ctrl-C stops both", flush=True)
            return _wait_in_foreground(server)
        server = read_state(folder)
        if server is None:
            print(f"team_server: no team server recorded in {folder}",
                  file=sys.stderr if args.action == "env" else sys.stdout)
            return 0 if args.action == "stop" else 1
        if args.action == "env":
            admin = read_credentials(folder / CREDENTIALS_FILE)
            print(f"export MLFLOW_TRACKING_URI={server.tracking_uri}\n"
                  f"export MLFLOW_TRACKING_USERNAME={shlex.quote(admin.username)}\n"
                  f"export MLFLOW_TRACKING_PASSWORD={shlex.quote(admin.password)}")
            return 0
        if args.action == "status":
            state = {True: "running", False: "not running"}
            print(f"team_server: {server.tracking_uri}: MLflow PID {server.mlflow.pid} "
                  f"{state[server.mlflow.running()]}, PostgreSQL PID {server.postgres.pid} "
                  f"{state[server.postgres.running()]} (port {server.postgres_port})")
            return 0 if server.running() else 1
        stop(server)
        print(f"team_server: stopped MLflow (PID {server.mlflow.pid}) and PostgreSQL (PID {server.postgres.pid})")
        return 0
    except ToksError as error:
        print(f"team_server: {error}", file=sys.stderr)
        return 2
    except TeamServerError as error:
        print(f"team_server: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
