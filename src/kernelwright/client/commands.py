"""`kernelwright serve`: the evaluation service on a private unix socket (default) or on TCP with a token."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any


def default_socket() -> Path:
    """$XDG_RUNTIME_DIR/kernelwright/judge.sock, else the cache folder's serve/judge.sock."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "kernelwright" / "judge.sock"
    from kernelwright.judge.build import cache_dir

    return cache_dir() / "serve" / "judge.sock"


def service_flag(p: argparse.ArgumentParser) -> None:
    """`--service URL` on a command that judges: cli.main puts it in KERNELWRIGHT_SERVICE, which
    every judgement of the command reads (kernelwright.client.Judge)."""
    p.add_argument("--service", default=None, metavar="URL",
                   help="judge through a running `kernelwright serve` (unix:///PATH or http://HOST:PORT; default $KERNELWRIGHT_SERVICE); "
                        "cached baselines then come from the service's store")


def pool_flags(p: argparse.ArgumentParser) -> None:
    """`--ray [ADDRESS]` and `--pool N` on a command that judges many candidates (client.pool)."""
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="judge on Ray actors, one per GPU (on CUDA): a running cluster at ADDRESS, or a local Ray when none is given "
                        "(the `ray` extra)")
    p.add_argument("--pool", type=int, default=None, metavar="N",
                   help="judge N candidates at once, each worker holding one device's judge: Ray actors with --ray, else processes "
                        "on this machine (default with --ray: the cluster's GPUs on CUDA, 2 on the CPU)")


def pool_wanted(args: argparse.Namespace) -> bool:
    """Whether the command was given --ray or --pool."""
    return getattr(args, "ray", None) is not None or getattr(args, "pool", None) is not None


def check_pool_args(args: argparse.Namespace, policy: Any = None) -> None:
    """ValueError, before any worker starts, for --service beside --ray/--pool and for a policy a
    pool cannot honour (an explicit cached baselines, a GPU index other than 0)."""
    if getattr(args, "service", None):
        raise ValueError("--service and --ray/--pool are two ways of judging elsewhere: give one")
    if policy is not None:
        from kernelwright.client.pool import Pool

        Pool.check(policy)


def pool_from_args(args: argparse.Namespace, device: str) -> Any:
    """The client.pool.Pool that --ray / --pool ask for, or None (ValueError for a bad combination)."""
    if not pool_wanted(args):
        return None
    check_pool_args(args)
    ray, n = getattr(args, "ray", None), getattr(args, "pool", None)
    from kernelwright.client.pool import Pool

    try:  # workers None: one per GPU of the cluster (Ray) or of this machine, 2 on the CPU
        return Pool("ray" if ray is not None else "local", workers=n, device=device, address=ray or None)
    except (ImportError, RuntimeError, OSError) as exc:  # Ray missing or unreachable, a placement that never came, a worker that did not start
        raise ValueError(f"the judge's pool did not start: {exc}") from None


def use_service(args: argparse.Namespace) -> None:
    """Make a command's --service the process's KERNELWRIGHT_SERVICE (checked: ValueError)."""
    url = getattr(args, "service", None)
    if url:
        from kernelwright.client.judge import SERVICE_ENV, Judge

        Judge(url)  # ValueError for a malformed URL
        os.environ[SERVICE_ENV] = url


def add_parser(sub: Any) -> None:
    """Register `kernelwright serve` on the CLI's subparsers."""
    p = sub.add_parser("serve", help="a local evaluation service holding warm judge workers",
                       description="Judge candidates for any number of callers (eval/check --service, kernelwright.client.Judge) "
                                   "with warm workers kept for the service's lifetime. Listens on a unix socket only this user "
                                   "can open, or on TCP with a bearer token.")
    p.add_argument("--socket", type=Path, default=None,
                   help=f"unix socket path (default: {default_socket()}), in a folder only you can enter or one not yet made "
                        "(made 0700); a shared folder such as /tmp is refused")
    p.add_argument("--port", type=int, default=None, help="listen on TCP at this port instead (127.0.0.1 unless --host); needs a token")
    p.add_argument("--host", default="127.0.0.1", help="TCP only: the address to bind (default 127.0.0.1)")
    p.add_argument("--token-file", type=Path, default=None,
                   help="TCP only: read the token from this file, or write a new one there (mode 0600) when it does not exist")
    p.add_argument("--workers", type=int, default=None, help="evaluations judged at once (default 2; timing is serialised per GPU); "
                                                             "with --ray or --pool, the pool's workers judge instead")
    pool_flags(p)
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="with --ray or --pool: the pool's device (default auto: CUDA where the cluster or this machine has GPUs)")
    p.set_defaults(func=serve_cmd)


def _token(path: Path | None) -> str:
    if path is not None and path.is_file():
        token = path.read_text().strip()
        if not token:
            raise ValueError(f"{path}: the token file is empty")
        return token
    token = secrets.token_urlsafe(32)
    if path is not None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    return token


def _warm_host_facts() -> None:
    """In the background, the build's memoised host facts (the C++ ones always, the CUDA ones when
    the driver shows a GPU), while the fork server imports torch. Never torch itself: where the
    driver does not answer, resolve_device would import it, seconds of a CPU box."""
    import threading

    from kernelwright.judge import build
    from kernelwright.judge.evaluate import gpu_seen_by_driver

    device = "cuda" if gpu_seen_by_driver() else "cpu"
    threading.Thread(target=build.warm_host_facts, args=(device,), name="kw-host-facts", daemon=True).start()


def serve_cmd(args: argparse.Namespace) -> int:
    from kernelwright import written
    from kernelwright.console import err
    from kernelwright.client.service import JudgeService, make_server
    from kernelwright.core.sockets import remove_if_ours
    from kernelwright.errors import UsageError

    if args.port is not None and not 0 < args.port < 65536:
        raise UsageError(f"--port must be in 1..65535, got {args.port}")
    had_token = args.token_file is not None and args.token_file.is_file()
    pooled = pool_wanted(args)
    if args.workers is not None and pooled:
        raise UsageError("--workers is this process's judging; with --ray or --pool the pool's workers judge (--pool N sets how many)")
    if getattr(args, "device", "auto") != "auto" and not pooled:
        raise UsageError("--device is the pool's (with --ray or --pool); without one, each request names its own device")
    before = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # from here on a kill cleans up as Ctrl-C does, in a pool's start too
    pool = server = service = None
    try:
        try:
            token = _token(args.token_file) if args.port is not None else None
            # bound before the pool starts (a port in use costs no Ray start); requests wait in the backlog until serve_forever
            server, url = make_server(None, socket_path=None if args.port is not None else (args.socket or default_socket()),
                                      host=args.host, port=args.port, token=token)
            pool = pool_from_args(args, getattr(args, "device", "auto"))
            service = server.service = JudgeService(workers=2 if args.workers is None else args.workers, pool=pool)
        except (ValueError, OSError) as exc:
            raise UsageError(str(exc)) from None
        if pool is None:
            from kernelwright.judge import forkpool

            forkpool.warm_up()
            _warm_host_facts()
        err.print(f"kernelwright serve: listening on {url}" + ("" if pool is None else f", judging on a pool of {pool.size} {pool.device} worker(s)"),
                  markup=False, highlight=False)
        if token is not None:
            if args.token_file is not None and not had_token:
                written.tell([written.wrote(args.token_file, "a new token, mode 0600")])
            where = f"in {args.token_file}" if args.token_file else token
            err.print(f"  token: {where} (send it as 'Authorization: Bearer TOKEN', or set KERNELWRIGHT_SERVICE_TOKEN)", markup=False, highlight=False)
        err.print(f"  use it with: KERNELWRIGHT_SERVICE={url} kernelwright eval ... (or --service {url})", markup=False, highlight=False)
        try:
            server.serve_forever(poll_interval=0.5)
        except (KeyboardInterrupt, SystemExit):
            pass
    finally:
        if server is not None:
            server.server_close()
            if args.port is None:
                remove_if_ours(url.removeprefix("unix://"), server.bound)  # first: not a socket another serve bound there since
        if service is not None:
            service.close()
        if pool is not None:
            pool.close()
        signal.signal(signal.SIGTERM, before)
    return 0
