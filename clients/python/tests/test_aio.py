"""The asyncio client against a real server: sessions, bash, streams, files, background processes
and exposed ports, an error, a cancel."""
import asyncio
import random
import unittest

import grpc

from agent_workspace import errors, pb
from agent_workspace.aio import AsyncAgentWorkspace

from ._server import API_KEY, URL, require_server, unique


class AsyncClient(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        require_server()
        self.client = AsyncAgentWorkspace(URL, api_key=API_KEY, timeout=60)
        self.ws = await self.client.create_workspace()

    async def asyncTearDown(self) -> None:
        await self.ws.delete_workspace()
        await self.client.close()

    async def test_bash_files_and_an_error(self) -> None:
        self.assertEqual((await self.ws.bash("echo hi; exit 2")).exit_code, 2)
        await self.ws.write("a.txt", "one\n")
        self.assertEqual((await self.ws.read("a.txt")).content, "1: one")
        await self.ws.edit("a.txt", "one", "two")
        self.assertEqual([m.content for m in (await self.ws.grep("two")).matches], ["two"])
        with self.assertRaises(errors.FileNotFound) as caught:
            await self.ws.read("missing.txt")
        self.assertEqual(caught.exception.code, grpc.StatusCode.NOT_FOUND)
        # Calls run concurrently on one channel.
        results = await asyncio.gather(*(self.ws.bash(f"echo {i}") for i in range(10)))
        self.assertEqual([r.stdout for r in results], [f"{i}\n" for i in range(10)])

    async def test_stream_bash_and_stream_grep(self) -> None:
        async with self.ws.stream_bash(r"printf '\xe2\x82'; sleep 0.2; printf '\xac'; echo e >&2") as stream:
            output = await stream.collect()
        self.assertEqual((output.stdout, output.stderr, output.exited.exit_code), ("€", "e\n", 0))
        await self.ws.write("g.txt", "x\nx\n")
        grep = self.ws.stream_grep("x")
        self.assertEqual([m.line async for m in grep], [1, 2])
        self.assertEqual(grep.done.match_count, 2)

    async def test_a_cancelled_stream_kills_its_command(self) -> None:
        stream = self.ws.stream_bash("echo $$ > shell.pid; echo begun; sleep 8; echo late > marker")
        async with stream:
            async for chunk in stream:
                self.assertEqual(chunk.text, "begun\n")
                break
        self.assertTrue(stream.cancelled)
        gone = await self.ws.bash("p=$(cat shell.pid); for i in $(seq 200); do kill -0 $p 2>/dev/null || { echo gone; exit; }; sleep 0.05; done; echo alive")
        self.assertEqual(gone.stdout, "gone\n")
        self.assertEqual((await self.ws.bash("test -e marker && echo written || echo absent")).stdout, "absent\n")

    async def test_a_background_process_and_an_exposed_port(self) -> None:
        processes = self.ws.processes
        process = await processes.start('while read -r line; do echo "got $line"; done; echo bye', stdin=True)
        self.assertEqual(await processes.write(process.process_id, "one\n"), 4)
        self.assertEqual(await processes.write(process.process_id, "two\n", close=True), 4)
        waited = await processes.wait(process.process_id, timeout_ms=30_000)
        self.assertEqual((waited.timed_out, waited.process.state, waited.process.exit_code), (False, pb.process.PROCESS_STATE_EXITED, 0))
        self.assertEqual((await processes.read(process.process_id)).stdout, b"got one\ngot two\nbye\n")
        async with processes.attach(process.process_id) as stream:
            events = [e async for e in stream]
        self.assertEqual(events[-1].WhichOneof("event"), "ended")
        self.assertEqual(b"".join(e.stdout.data for e in events if e.WhichOneof("event") == "stdout"), b"got one\ngot two\nbye\n")
        self.assertIn(process.process_id, [p.process_id for p in await processes.list()])
        with self.assertRaises(errors.ProcessNotRunning):
            await processes.signal(process.process_id, "TERM")
        port = random.randint(20000, 40000)
        exposed = await processes.expose_port(port)
        self.assertEqual((exposed.port.path, exposed.listening), (f"/ports/{self.ws.id}/{port}/", False))
        self.assertEqual([p.port for p in await processes.list_exposed_ports()], [port])
        self.assertEqual(await processes.unexpose_port(port), 0)

    async def test_a_session_with_async_with_is_ready_and_ended_on_exit(self) -> None:
        agent_type = unique("py-async")
        await self.client.create_agent_type(agent_type, workspace={"enabled": True, "tools": ["bash"]})
        async with self.client.start_session(agent_type) as session:
            ready = await session.wait_ready()
            self.assertEqual(ready.status, pb.workspace.SESSION_STATUS_ACTIVE)
            self.assertEqual((await session.workspace.bash("echo in session")).stdout, "in session\n")
        self.assertEqual((await self.client.session(session.id)).info.status, pb.workspace.SESSION_STATUS_ENDED)
        with self.assertRaises(errors.Unauthenticated):
            await session.workspace.bash("true")


if __name__ == "__main__":
    unittest.main()
