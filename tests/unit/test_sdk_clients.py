"""One SDK client per configuration and process: model calls reuse its TLS context and connections."""

from __future__ import annotations

import os

from shared.adapters.sdk_clients import anthropic_client, openai_client


def test_the_same_configuration_shares_one_client_and_another_gets_its_own() -> None:
    first = anthropic_client(api_key="k", base_url="http://127.0.0.1:9/a", timeout=30)
    assert anthropic_client(api_key="k", base_url="http://127.0.0.1:9/a", timeout=30) is first
    assert anthropic_client(api_key="k", base_url="http://127.0.0.1:9/b", timeout=30) is not first
    assert anthropic_client(api_key="other", base_url="http://127.0.0.1:9/a", timeout=30) is not first
    assert openai_client(api_key="k", base_url="http://127.0.0.1:9/a", timeout=30) is not first
    assert openai_client(api_key="k", base_url="http://127.0.0.1:9/a", timeout=30) is openai_client(
        api_key="k", base_url="http://127.0.0.1:9/a", timeout=30
    )


def test_a_forked_child_does_not_reuse_its_parents_client() -> None:
    parent = openai_client(api_key="k", base_url="http://127.0.0.1:9/fork", timeout=30)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when it built a client of its own
        child = openai_client(api_key="k", base_url="http://127.0.0.1:9/fork", timeout=30)
        os._exit(0 if child is not parent else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
