"""Run a framework's command line many times without paying its imports each time: a server process imports the
framework once, then forks a child per run.

Why: ``lerobot-train`` and robomimic's ``train.py`` spend ~5 s of every run importing torch, LeRobot or robomimic
before they read an argument, and the CLI tests run them ~60 times (a parse-time refusal is almost all import).
A forked child is the process ``python -m <module>`` or the console script would be, with the same imports, the
same import hook (armed by the environment the server started with) and the same exit status; only the imports
are already done. Runs that need another environment (``ROBO_LOADERS_DISABLE``, read once at interpreter start)
still start a process of their own.

The server reads one JSON request per line on stdin and answers one line ``{"rc": N}`` once the child exited;
the child's stdout and stderr go, interleaved as on a terminal, to the file the request names.
"""

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile

SERVER = r"""
import atexit, importlib, json, os, runpy, sys
for name in sys.argv[1:]:
    importlib.import_module(name)  # the expensive imports, once, before any fork
requests = sys.stdin
for line in requests:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            out = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdin = open(os.devnull)
            os.chdir(req["cwd"])
            sys.argv = list(req["argv"])
            try:
                if "entry" in req:  # a console script: module:function, called as its wrapper does
                    module, function = req["entry"].split(":")
                    result = getattr(importlib.import_module(module), function)()
                    code = result if isinstance(result, int) else 0
                else:  # python -m <module>
                    runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
                    code = 0
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:  # sys.exit("message"): printed, status 1, as the interpreter does
                    print(exc.code, file=sys.stderr)
                    code = 1
            except BaseException:
                sys.excepthook(*sys.exc_info())  # what the interpreter prints (a hook the run set included)
                code = 1
            atexit._run_exitfuncs()  # what the interpreter runs at exit (DataLoader workers, logging)
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class ForkedRuns:
    """A server that imports ``modules`` once and runs each command in a forked child.

    Args:
        modules: Modules to import in the server before any run (the framework's script and what it imports).
        env: The environment of the server, hence of every run.
    """

    def __init__(self, modules, env):
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: a hung run is killed with it (close)
        )

    def run(self, argv, *, entry=None, module=None, timeout=600):
        """One run: ``argv`` as ``sys.argv``, either ``entry`` ("module:function", a console script) called or
        ``module`` run as ``python -m`` runs it.

        Returns:
            (exit status, stdout and stderr interleaved).
        """
        with tempfile.NamedTemporaryFile("r", suffix=".log", errors="replace") as log:
            req = {"argv": list(argv), "log": log.name, "cwd": os.getcwd()}
            req.update({"entry": entry} if entry else {"module": module})
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
            ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
            line = self._proc.stdout.readline() if ready else ""
            if not line:  # a run that hangs, or a server that died: both gone, with every forked run
                self._kill()
                raise RuntimeError(
                    f"the forked run of {argv[:1]} gave no answer in {timeout} s (server exit status "
                    f"{self._proc.poll()})"
                )
            return json.loads(line)["rc"], log.read()

    def close(self):
        """Stop the server (its children have all exited: each run waits for its own)."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._kill()

    def _kill(self):
        """The server and every run it forked (one process group)."""
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
