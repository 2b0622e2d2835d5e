"""Run a proxy until it is stopped: one worker process per core on one port, each on the chosen event loop, with a
failure to bind reported as bad input.

Workers share the port through SO_REUSEPORT (the kernel spreads connections over them) and see each other through
the sibling table (ascend_pd.proxy.siblings): in-flight load, admin changes, the metaserver and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import signal
import socket
import time
from typing import Callable

from ascend_pd.errors import InputError
from ascend_pd.proxy.app import ProxyState, start_server
from ascend_pd.proxy.event_loop import EventLoopChoice, new_event_loop
from ascend_pd.proxy.memory_trace import install_from_environment
from ascend_pd.proxy.settings import ProxySettings
from ascend_pd.proxy.siblings import Siblings, make_siblings

PR_SET_PDEATHSIG = 1  # linux/prctl.h
MAX_RESTARTS = 10  # workers that die this often within the window: something is wrong, stop rather than spin
RESTART_WINDOW_SECONDS = 60

log = logging.getLogger("ascend_pd.proxy")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container's cpuset also sets)."""
    return len(os.sched_getaffinity(0))


def serve(make_proxy: Callable[[Siblings | None], ProxyState], host: str, port: int,
          event_loop: EventLoopChoice = "auto", workers: int = 1,
          started: Callable[[str], None] = lambda loop_name: None) -> None:
    """Serve the proxy `make_proxy` builds (once per worker, after the fork, so no two workers share a random
    state) on host:port; `started` hears the event loop's name once the port is known to be free."""
    check_port_free(host, port)
    try:
        loop, loop_name = new_event_loop(event_loop)
    except RuntimeError as exc:
        raise InputError(str(exc), field="--event-loop", fix="pip install uvloop, or pass --event-loop asyncio") \
            from None
    proxy = make_proxy(None)  # bad input (a policy name, a tokenizer file) fails here, once, before any fork
    if proxy.settings.admin_port is not None:
        check_admin_listener(proxy.settings, port)
    started(loop_name)
    if workers == 1:
        _run_worker(loop, proxy, host, port, reuse_port=False)
        return
    loop.close()  # each worker makes its own after the fork
    if not _supervise(make_proxy, host, port, event_loop, workers):
        raise SystemExit(1)


def check_admin_listener(settings: ProxySettings, port: int) -> None:
    """The admin listener's flags make sense together, and its port is free."""
    if not settings.admin_token:
        raise InputError("the admin endpoints exist only with an admin token: the admin port would serve nothing",
                         field="--admin-port", fix="give the proxy its admin token, or leave out --admin-port")
    if settings.admin_port == port:
        raise InputError(f"port {port} is the public port", field="--admin-port",
                         fix="give the admin endpoints a port of their own, or leave out --admin-port")
    check_port_free(settings.admin_host, settings.admin_port, ("--admin-host", "--admin-port"))


def check_port_free(host: str, port: int, flags: tuple[str, str] = ("--host", "--port")) -> None:
    """Bind once without SO_REUSEPORT, so a port another process holds (even with SO_REUSEPORT) is an error here and
    not a silent share."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise listen_error(host, port, exc, flags) from None


def listen_error(host: str, port: int, exc: OSError, flags: tuple[str, str] = ("--host", "--port")) -> InputError:
    """A bind failure as the flag to change (`flags`: the host's and the port's): the port in use, or an address
    this machine does not have."""
    host_flag, port_flag = flags
    if exc.errno == errno.EADDRINUSE:
        return InputError(f"port {port} is already in use on {host}", field=port_flag,
                          fix=f"stop the process listening there (ss -ltnp 'sport = :{port}'), or pass another "
                              f"{port_flag}")
    return InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field=host_flag,
                      fix="pass an address of this machine, or 0.0.0.0 for all of them")


def _run_worker(loop: asyncio.AbstractEventLoop, proxy: ProxyState, host: str, port: int, reuse_port: bool,
                siblings: Siblings | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then stop taking connections and finish what is in flight (1 s grace)."""
    asyncio.set_event_loop(loop)
    install_from_environment(loop)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    async def main() -> None:
        try:
            server, _ = await start_server(proxy, host, port, reuse_port, siblings)
        except OSError as exc:
            raise listen_error(host, port, exc) from None
        try:
            await stop.wait()
        finally:
            await server.cleanup()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


def _die_with(supervisor: int) -> None:
    """Have the kernel send this worker SIGTERM when the supervisor dies, even by SIGKILL: orphaned workers would
    go on serving the port with a stale view of the backends."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        log.warning("cannot ask for SIGTERM on the supervisor's death (errno %d)", ctypes.get_errno())
    if os.getppid() != supervisor:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _supervise(make_proxy: Callable[[Siblings | None], ProxyState], host: str, port: int, event_loop: EventLoopChoice,
               workers: int) -> bool:
    """Fork the workers and keep them running: one that dies is started again (its share of the load table is
    cleared first); SIGTERM or SIGINT stops them all and waits for them. False if they kept dying."""
    load, private_sockets = make_siblings(workers)
    children: dict[int, int] = {}  # pid -> worker index
    stopping = False

    supervisor = os.getpid()

    def start(worker: int) -> None:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                    signal.signal(signum, signal.SIG_DFL)
                _die_with(supervisor)
                load.worker = worker
                loop, _ = new_event_loop(event_loop)
                siblings = Siblings(worker, private_sockets, load)
                _run_worker(loop, make_proxy(siblings), host, port, True, siblings)
            except BaseException:  # a worker never returns into the supervisor's code
                log.exception("proxy worker %d failed", worker)
                code = 1
            finally:
                os._exit(code)
        children[pid] = worker

    def tell_workers(signum: int) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def stop(signum, frame) -> None:
        nonlocal stopping
        stopping = True
        tell_workers(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # the memory probe (ascend_pd.proxy.memory_trace) lives in the workers: each writes its own snapshot
    signal.signal(signal.SIGUSR1, lambda signum, frame: tell_workers(signum))
    for worker in range(workers):
        start(worker)
    restarts: list[float] = []
    gave_up = False
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        worker = children.pop(pid, None)
        if worker is None or stopping:
            continue
        load.forget_worker(worker)
        now = time.monotonic()
        restarts = [t for t in restarts if now - t < RESTART_WINDOW_SECONDS] + [now]
        if len(restarts) > MAX_RESTARTS:
            log.error("proxy workers died %d times in %d s; stopping", len(restarts), RESTART_WINDOW_SECONDS)
            gave_up = True
            stop(signal.SIGTERM, None)
            continue
        log.warning("proxy worker %d (pid %d) exited with status %d; starting it again", worker, pid,
                    os.waitstatus_to_exitcode(status))
        start(worker)
    return not gave_up
