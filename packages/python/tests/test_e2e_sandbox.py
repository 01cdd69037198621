"""End to end against a real daemon: create, exec (results, check, live output, timeouts),
list/connect/refresh/ttl, the context manager, hibernate/resume, network and URLs."""

from __future__ import annotations

import socket
import time
import uuid

from _support import E2ECase, eventually

from warren import CommandError, CredentialRule, NotFoundError, Resources, Sandbox


class Exec(E2ECase):
    sbx: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sbx = Sandbox.create(template="base", ttl_seconds=900, metadata={"suite": "python", "test": "exec"}, env={"GREETING": "hi there"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sbx.kill()

    def test_results_of_shell_commands_and_argv(self) -> None:
        r = self.sbx.exec("echo $GREETING; echo oops >&2; exit 3")
        self.assertEqual((r.stdout, r.stderr, r.exit_code, r.timed_out), ("hi there\n", "oops\n", 3, False))
        self.assertGreater(r.duration_ms, 0)
        self.assertGreater(r.pid, 0)
        r = self.sbx.exec(["printf", "%s|", "a b", "$HOME", "*"])
        self.assertEqual(r.stdout, "a b|$HOME|*|")

    def test_default_user_cwd_and_the_options(self) -> None:
        self.assertEqual(self.sbx.exec("id -un; pwd").stdout, "user\n/home/user\n")
        self.assertEqual(self.sbx.exec("id -un; pwd", user="root", cwd="/tmp").stdout, "root\n/tmp\n")
        self.assertEqual(self.sbx.exec("echo $A-$GREETING", env={"A": "1"}).stdout, "1-hi there\n")
        self.assertEqual(self.sbx.exec("tr a-z A-Z", stdin="from stdin\n").stdout, "FROM STDIN\n")
        self.assertEqual(self.sbx.exec("mkdir -p /work/x && cd /work/x && pwd").stdout, "/work/x\n", "the base template gives user a writable /work")

    def test_check_raises_command_error_with_the_result(self) -> None:
        self.assertEqual(self.sbx.exec("echo fine", check=True).stdout, "fine\n")
        with self.assertRaises(CommandError) as caught:
            self.sbx.exec("echo partial; echo 'it broke' >&2; exit 4", check=True)
        err = caught.exception
        self.assertEqual((err.exit_code, err.result.stdout, err.stderr), (4, "partial\n", "it broke\n"))
        self.assertIn("exited with code 4: it broke", str(err))

    def test_a_timeout_kills_the_command_and_says_so(self) -> None:
        started = time.monotonic()
        r = self.sbx.exec("echo before; sleep 30", timeout_seconds=1)
        self.assertLess(time.monotonic() - started, 15)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.stdout, "before\n")
        with self.assertRaises(CommandError) as caught:
            self.sbx.exec("sleep 30", timeout_seconds=0.5, check=True)
        self.assertTrue(caught.exception.timed_out)

    def test_output_reaches_the_callbacks_while_the_command_runs(self) -> None:
        seen: list[tuple[float, str]] = []
        errs: list[str] = []
        self.sbx.exec(
            "for i in 1 2 3; do echo $i; echo e$i >&2; sleep 0.4; done",
            on_stdout=lambda d: seen.append((time.monotonic(), d)),
            on_stderr=errs.append,
        )
        done = time.monotonic()
        self.assertEqual("".join(d for _, d in seen), "1\n2\n3\n")
        self.assertEqual("".join(errs), "e1\ne2\ne3\n")
        self.assertGreater(len(seen), 1, "output came in pieces as printed")
        self.assertGreater(done - seen[0][0], 0.6, "the first line was passed on long before the exit")


class Lifecycle(E2ECase):
    def test_list_connect_refresh_and_ttl(self) -> None:
        run = uuid.uuid4().hex[:8]
        sbx = self.create(metadata={"run": run}, resources=Resources(cpus=1, memory_mb=512))
        self.assertEqual((sbx.info.state, sbx.info.template, sbx.info.boot), ("running", "base", sbx.info.boot))
        self.assertEqual((sbx.info.resources.cpus, sbx.info.resources.memory_mb), (1, 512))
        self.assertEqual(sbx.info.metadata["run"], run)
        listed = Sandbox.list(metadata={"run": run})
        self.assertEqual([s.id for s in listed], [sbx.id])
        self.assertEqual(Sandbox.list(metadata={"run": run}, state="hibernated"), [])
        again = Sandbox.connect(sbx.id)
        self.assertEqual(again.exec("echo same").stdout, "same\n")
        before = sbx.info.expires_at
        info = sbx.set_ttl(3000)
        self.assertGreater(info.expires_at, before)
        self.assertEqual(sbx.refresh().expires_at, info.expires_at)
        self.assertIsNotNone(sbx.refresh().disk_bytes)

    def test_the_context_manager_kills_the_sandbox(self) -> None:
        with Sandbox.create(metadata={"suite": "python"}) as sbx:
            self.assertEqual(sbx.exec("echo in").stdout, "in\n")
        with self.assertRaises(NotFoundError):
            Sandbox.connect(sbx.id)
        # An error in the block still kills it, and the error is the one raised.
        with self.assertRaises(ZeroDivisionError):
            with Sandbox.create(metadata={"suite": "python"}) as failing:
                1 / 0
        with self.assertRaises(NotFoundError):
            Sandbox.connect(failing.id)
        # Killed inside the block: leaving it is not an error.
        with Sandbox.create(metadata={"suite": "python"}) as early:
            early.kill()

    def test_hibernate_keeps_processes_and_files_and_any_call_resumes(self) -> None:
        sbx = self.create()
        # Renamed into place: a read racing a truncate-and-write would see a file shorter than its size.
        counter = sbx.exec("n=0; while true; do n=$((n+1)); echo $n > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.1; done", background=True, tag="counter")
        eventually(lambda: sbx.files.exists("/tmp/n"), 10, "the counter to start")
        self.assertEqual(sbx.hibernate().state, "hibernated")
        self.assertEqual(sbx.refresh().state, "hibernated")
        self.assertEqual(sbx.resume().state, "running")
        first = int(sbx.files.read_text("/tmp/n"))
        eventually(lambda: int(sbx.files.read_text("/tmp/n")) > first, 10, "the counter to go on after resume")
        [p] = [p for p in sbx.processes.list() if p.pid == counter.pid]
        self.assertTrue(p.running)
        sbx.hibernate()
        # exec on a hibernated sandbox resumes it first.
        self.assertEqual(sbx.exec("echo awake").stdout, "awake\n")
        self.assertEqual(sbx.refresh().state, "running")


class Network(E2ECase):
    def test_policy_credentials_egress_log_and_port_urls(self) -> None:
        sbx = self.create(allow=["example.com:443"], credentials=[CredentialRule(host="example.com:443", headers={"Authorization": "Bearer s3cret"})])
        policy = sbx.get_network()
        self.assertEqual(policy.allow, ["example.com:443"])
        assert policy.credentials is not None
        self.assertEqual([c.host for c in policy.credentials], ["example.com:443"])
        self.assertNotIn("s3cret", repr(policy))
        self.assertEqual(sbx.set_network(["*.example.org"]).allow, ["*.example.org"])
        # Refused by the proxy before any name is resolved: no traffic leaves the machine.
        self.assertEqual(sbx.exec("curl -s -m 5 -o /dev/null -w '%{http_code}' http://denied.example/").stdout, "403")
        entries = sbx.egress_log()
        self.assertEqual([(e.host, e.port, e.decision) for e in entries], [("denied.example", 80, "denied")])
        self.assertEqual(sbx.egress_log(after=entries[-1].id), [])
        url = sbx.get_url(8000, expires_in_seconds=60)
        self.assertIn(f"8000-{sbx.id}.localhost", url)
        self.assertIn("warren_token=", url)

    def test_tcp_forward(self) -> None:
        sbx = self.create()
        sbx.exec("python3 -c 'import socket; s = socket.create_server((\"127.0.0.1\", 7001)); c, _ = s.accept(); c.sendall(c.recv(100).upper())'", background=True)
        forward = sbx.forward_port(7001)
        self.assertEqual((forward["port"], forward["host"]), (7001, "127.0.0.1"))
        self.assertEqual([f["hostPort"] for f in sbx.forwards()], [forward["hostPort"]])
        deadline = time.monotonic() + 20
        while True:
            # The server inside may not listen yet: the forward then closes the connection.
            with socket.create_connection(("127.0.0.1", forward["hostPort"]), timeout=10) as conn:
                conn.sendall(b"ping")
                got = conn.recv(100)
            if got or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(got, b"PING")
        sbx.close_forward(7001)
        self.assertEqual(sbx.forwards(), [])
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", forward["hostPort"]), timeout=10).close()
