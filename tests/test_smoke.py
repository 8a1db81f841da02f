from tests.rpc import send


async def test_echo_like_send_completes(client):
    task = await send(client, "say:hello")
    assert task["kind"] == "task"
    assert task["status"]["state"] == "completed"
