"""Pure parts of the admin subcommands: table formatting, argument parsing, where they connect and
what they say on stderr."""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path

import pytest
from ottermq.broker.cli.admin import (
    GET_COLUMNS,
    add_parsers,
    cell,
    changes,
    describe,
    format_table,
    get_row,
    run,
)
from ottermq.broker.cli.api import AdminError, announce, client_of
from ottermq.broker.cli.dlq_move import progress
from ottermq.broker.cli.main import main
from ottermq.broker.config import admin_defaults


def test_table_aligns_columns_under_a_dashed_rule() -> None:
    rows = [{"name": "orders", "messages": 12}, {"name": "q", "messages": 0}]
    assert format_table(rows, ["name", "messages"]) == (
        "name    messages\n------  --------\norders  12\nq       0\n"
    )


def test_table_without_items_says_none() -> None:
    assert format_table([], ["name"]) == "(none)\n"


def test_wide_header_sets_the_width_and_trailing_spaces_are_cut() -> None:
    assert format_table([{"a": "x", "long_header": ""}], ["a", "long_header"]) == (
        "a  long_header\n-  -----------\nx\n"
    )


@pytest.mark.parametrize(
    ("item", "column", "text"),
    [
        ({"queue": {"name": "q"}}, "queue.name", "q"),
        ({"queue": None}, "queue.name", ""),
        ({}, "missing", ""),
        ({"durable": True}, "durable", "true"),
        ({"tags": ["administrator", "monitoring"]}, "tags", "administrator,monitoring"),
        ({"arguments": {"b": 1, "a": "x"}}, "arguments", '{"a": "x", "b": 1}'),
        ({"payload": "two\nlines"}, "payload", "two\nlines"),
    ],
)
def test_cell_text(item: dict[str, object], column: str, text: str) -> None:
    assert cell(item, column) == text


def test_newlines_in_values_do_not_break_rows() -> None:
    assert format_table([{"p": "a\nb"}], ["p"]).splitlines() == ["p", "---", "a b"]


def test_unknown_list_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["list", "nodes"])
    assert info.value.code == 2
    assert "invalid choice: 'nodes'" in capsys.readouterr().err


def test_unreachable_api_exits_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "queues", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ottermq list: cannot reach http://127.0.0.1:9") and err.count("\n") == 1


# -- ottermq get: x-death, message_id, application headers ----------------------------------------------
DEAD = {
    "routing_key": "dlq",
    "payload": "hello",
    "properties": {
        "message_id": "m-1",
        "headers": {
            "tenant": "acme",
            "x-death": [
                {
                    "reason": "expired",
                    "queue": "retry",
                    "count": 2,
                    "exchange": "",
                    "routing-keys": ["retry"],
                },
                {"reason": "rejected", "queue": "work", "count": 1, "exchange": "", "routing-keys": ["work"]},
            ],
            "x-first-death-queue": "work",
            "x-first-death-reason": "rejected",
            "x-last-death-queue": "retry",
        },
    },
}


def test_get_row_shows_deaths_message_id_and_the_applications_headers() -> None:
    row = get_row(DEAD)
    assert row["message_id"] == "m-1"
    assert row["x-death"] == "expired in retry (count 2); rejected in work (count 1)"
    assert row["headers"] == {"tenant": "acme"}
    table = format_table([row], GET_COLUMNS).splitlines()
    assert table[0].split() == GET_COLUMNS
    assert table[2].split()[-1] == "hello" and '{"tenant": "acme"}' in table[2]


def test_get_row_without_properties_as_rabbitmq_sends_them() -> None:
    row = get_row({"payload": "p", "properties": []})  # RabbitMQ: [] for no properties
    assert (row["message_id"], row["x-death"], row["headers"]) == (None, "", None)


# -- where the admin commands connect ---------------------------------------------------------------------
@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No OTTERMQ_* variable and an empty working directory (no .env)."""
    for name in list(os.environ):
        if name.upper().startswith("OTTERMQ_") or name.upper() == "LOG_LEVEL":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_are_rabbitmqs_with_the_brokers_defaults(clean_env: Path) -> None:
    assert admin_defaults() == {
        "url": "http://localhost:15672",
        "api_path": "/api",
        "cafile": "",
        "user": "guest",
        "password": "guest",
        "origin": "the default OTTERMQ_WEB_PORT=15672: neither the environment nor ./.env sets it",
    }


def test_the_admin_variables_are_read_from_dot_env_too(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (clean_env / ".env").write_text(
        "OTTERMQ_WEB_PORT=25673\nOTTERMQ_ADMIN_URL=http://other:15672\nOTTERMQ_ADMIN_USER=ops\n"
        "OTTERMQ_ADMIN_PASSWORD=s3cret\n"
    )
    monkeypatch.setenv("OTTERMQ_ADMIN_USER", "env-wins")
    defaults = admin_defaults()
    assert (defaults["url"], defaults["user"], defaults["password"], defaults["origin"]) == (
        "http://other:15672",
        "env-wins",
        "s3cret",
        "OTTERMQ_ADMIN_URL",
    )


def test_the_origin_names_the_setting_that_gives_the_port(clean_env: Path) -> None:
    (clean_env / ".env").write_text("OTTERMQ_WEB_PORT=15673\n")
    assert admin_defaults()["origin"] == "OTTERMQ_WEB_PORT=15673"
    (clean_env / ".env").write_text("OTTERMQ_WEB_SSL=true\nOTTERMQ_WEB_SSL_PORT=25671\n")
    assert admin_defaults()["origin"] == "OTTERMQ_WEB_SSL_PORT=25671"


@pytest.mark.parametrize(
    ("argv", "changing"),
    [
        (["list", "queues"], False),
        (["users", "list"], False),
        (["policies", "list"], False),
        (["limits", "list"], False),
        (["get", "q"], False),
        (["get", "q", "--ackmode", "reject_requeue_true"], False),
        (["get", "q", "--ackmode", "ack_requeue_false"], True),
        (["get", "q", "--ackmode", "reject_requeue_false"], True),
        (["purge", "q"], True),
        (["publish", "--payload", "x"], True),
        (["close-connection", "c"], True),
        (["users", "passwd", "guest", "pw"], True),
        (["users", "add", "u", "pw"], True),
        (["permissions", "add", "/", "u"], True),
        (["vhosts", "delete", "v"], True),
        (["policies", "set", "p", ".*", "{}"], True),
        (["limits", "clear", "/"], True),
    ],
)
def test_which_commands_change_the_broker(argv: list[str], changing: bool) -> None:
    assert changes(parse(argv, OWN)) is changing


def test_defaults_follow_the_brokers_dotenv_and_environment(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (clean_env / ".env").write_text("OTTERMQ_WEB_PORT=25673\nOTTERMQ_PASSWORD=s3cret\nOTTERMQ_SYNC=bogus\n")
    monkeypatch.setenv("OTTERMQ_WEB_HOST", "127.0.0.2")
    defaults = admin_defaults()  # a bad unrelated value (OTTERMQ_SYNC) does not matter here
    assert (defaults["url"], defaults["user"], defaults["password"]) == (
        "http://127.0.0.2:25673",
        "guest",
        "s3cret",
    )


def test_defaults_with_https_ipv6_and_another_api_path(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "OTTERMQ_BROKER_HOST": "::1",
        "OTTERMQ_WEB_SSL": "true",
        "OTTERMQ_WEB_SSL_PORT": "25671",
        "OTTERMQ_SSL_CA_FILE": "/etc/ottermq/ca.pem",
        "OTTERMQ_WEB_API_PATH": "/mgmt/api/",
    }.items():
        monkeypatch.setenv(name, value)
    defaults = admin_defaults()
    assert (defaults["url"], defaults["api_path"], defaults["cafile"]) == (
        "https://[::1]:25671",
        "/mgmt/api",
        "/etc/ottermq/ca.pem",
    )


def test_admin_variables_win(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTTERMQ_WEB_PORT", "25673")
    monkeypatch.setenv("OTTERMQ_WEB_API_PATH", "/mgmt/api")
    monkeypatch.setenv("OTTERMQ_ADMIN_URL", "http://rabbit:15672")
    monkeypatch.setenv("OTTERMQ_ADMIN_USER", "ops")
    defaults = admin_defaults()
    assert (defaults["url"], defaults["api_path"], defaults["user"]) == ("http://rabbit:15672", "/api", "ops")


def parse(argv: list[str], defaults: dict[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_parsers(sub, defaults)
    return parser.parse_args(argv)


OWN = {"url": "https://localhost:25671", "api_path": "/mgmt/api", "cafile": "", "user": "u", "password": "p"}


def test_the_brokers_own_url_keeps_its_api_path_an_explicit_url_is_rabbitmqs() -> None:
    own = client_of(parse(["list", "queues"], OWN))
    assert (own.url, own.api_path) == ("https://localhost:25671", "/mgmt/api")
    other = client_of(parse(["list", "queues", "--url", "http://rabbit:15672/"], OWN))
    assert (other.url, other.api_path) == ("http://rabbit:15672", "/api")


def test_an_unreadable_ca_bundle_is_an_admin_error(tmp_path: Path) -> None:
    with pytest.raises(AdminError, match="cannot read the CA bundle"):
        client_of(parse(["list", "queues", "--cacert", str(tmp_path / "missing.pem")], OWN))


def test_the_password_is_not_shown_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["list", "--help"], {**OWN, "password": "s3cret-pw"})
    out = capsys.readouterr().out
    assert "s3cret-pw" not in out and "https://localhost:25671 (API at /mgmt/api)" in " ".join(out.split())


@pytest.mark.parametrize(
    ("argv", "doing", "scope"),
    [
        (["list", "queues"], "Listing queues of", "(all vhosts)"),
        (["list", "queues", "--vhost", "/"], "Listing queues of", "(vhost /)"),
        (["list", "users"], "Listing users of", ""),
        (["get", "q", "--count", "3"], "Getting 3 message(s) from queue 'q' of", "(vhost /)"),
        (["publish", "--payload", "p"], "Publishing to exchange 'amq.default' on", "(vhost /)"),
        (["users", "passwd", "bob", "pw"], "Changing the password of user 'bob' on", ""),
        (["policies", "set", "p", "^q$", "{}", "--operator"], "Setting operator policy 'p' on", "(vhost /)"),
        (["policies", "list"], "Listing policies of", "(all vhosts)"),
        (["limits", "clear", "bob", "--user-limits"], "Clearing user limits of 'bob' on", ""),
    ],
)
def test_what_each_command_says_it_does(argv: list[str], doing: str, scope: str) -> None:
    assert describe(parse(argv, OWN)) == (doing, scope)


NO_PASSWORD_HINT = "use --no-password for a user who logs in with a certificate only"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["users", "add", "carol", ""], f"an empty password never logs in; {NO_PASSWORD_HINT}"),
        (["users", "passwd", "carol", ""], f"an empty password never logs in; {NO_PASSWORD_HINT}"),
        (
            ["users", "add", "carol"],
            "give a PASSWORD, or --no-password for a user who logs in with a certificate only",
        ),
        (["users", "add", "carol", "pw", "--no-password"], "give a PASSWORD or --no-password, not both"),
    ],
)
def test_a_user_gets_a_password_or_no_password(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # refused before connecting: nothing listens on port 9, which would be another error
    assert run(parse([*argv, "--url", "http://127.0.0.1:9", "--quiet"], OWN)) == 1
    assert capsys.readouterr().err == f"ottermq users: {error}\n"


class RecordingClient:
    url = "http://localhost:15672"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, object]] = []

    def request(self, method: str, path: str, body: object = None) -> object:
        self.calls.append((method, path, body))
        if path == "/overview":  # every command asks who answers first
            return {"product_name": "OtterMQ", "product_version": "0.1.0"}
        return {"name": "carol", "tags": ["management"]} if method == "GET" else None


@pytest.mark.parametrize(
    ("argv", "put"),
    [
        (
            ["users", "add", "carol", "--no-password", "--tags", "management"],
            {"password_hash": "", "tags": "management"},
        ),
        (["users", "add", "carol", "pw"], {"password": "pw", "tags": ""}),
        (["users", "passwd", "carol", "--no-password"], {"password_hash": "", "tags": "management"}),
    ],
)
def test_no_password_sends_rabbitmqs_empty_hash(
    argv: list[str], put: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = RecordingClient()
    monkeypatch.setattr("ottermq.broker.cli.admin.client_of", lambda _args: client)
    assert run(parse([*argv, "--quiet"], OWN), out=io.StringIO()) == 0
    assert client.calls[-1] == ("PUT", "/users/carol", put)


class FakeClient:
    url = "http://localhost:15672"

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def request(self, method: str, path: str) -> object:
        assert (method, path) == ("GET", "/overview")
        if isinstance(self.answer, AdminError):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("overview", "line"),
    [
        ({"product_name": "RabbitMQ", "product_version": "3.10.8"}, "of RabbitMQ 3.10.8 at"),
        (
            {"product_name": "OtterMQ", "product_version": "0.1.0", "rabbitmq_version": "3.10.8"},
            "of OtterMQ 0.1.0 at",
        ),
        ({"rabbitmq_version": "3.7.28"}, "of RabbitMQ 3.7.28 at"),  # before product_name existed
    ],
)
def test_announce_names_the_product_that_answers(
    overview: dict[str, str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    announce(FakeClient(overview), "Listing queues of", "(all vhosts)", any_broker=True)  # type: ignore[arg-type]
    assert capsys.readouterr().err == f"Listing queues {line} http://localhost:15672/ (all vhosts)\n"


RABBITMQ = {"product_name": "RabbitMQ", "product_version": "3.10.8"}
ORIGIN = "the default OTTERMQ_WEB_PORT=15672: neither the environment nor ./.env sets it"


def test_a_broker_that_is_not_ottermq_gets_a_warning_even_when_quiet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    announce(FakeClient(RABBITMQ), "Listing queues of", quiet=True, origin=ORIGIN)  # type: ignore[arg-type]
    warning = capsys.readouterr().err
    assert warning.startswith(
        f"WARNING: RabbitMQ 3.10.8 at http://localhost:15672/ is not OtterMQ (the URL comes from {ORIGIN}; "
    )
    assert "set its ports in ./.env or give --url" in warning and warning.count("\n") == 1


def test_a_change_refuses_a_broker_that_is_not_ottermq_unless_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(
        AdminError, match=r"^refusing to change RabbitMQ 3.10.8 at http://localhost:15672/: it is"
    ):
        announce(FakeClient(RABBITMQ), "Purging queue 'q' on", changes=True, origin=ORIGIN)  # type: ignore[arg-type]
    assert capsys.readouterr().err == ""  # nothing said about purging: it was not done
    announce(FakeClient(RABBITMQ), "Purging queue 'q' on", changes=True, any_broker=True)  # type: ignore[arg-type]
    ours = {"product_name": "OtterMQ", "product_version": "0.1.0"}
    announce(FakeClient(ours), "Purging queue 'q' on", changes=True, quiet=True)  # type: ignore[arg-type]
    assert capsys.readouterr().err == "Purging queue 'q' on RabbitMQ 3.10.8 at http://localhost:15672/\n"


def test_announce_leaves_an_error_status_to_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    announce(FakeClient(AdminError("401 Unauthorized", 401)), "Listing queues of")  # type: ignore[arg-type]
    assert capsys.readouterr().err == ""
    with pytest.raises(AdminError):
        announce(FakeClient(AdminError("cannot reach")), "Listing queues of")  # type: ignore[arg-type]


# -- ottermq dlq move's progress ----------------------------------------------------------------------------
def test_move_progress_never_says_0_of_0() -> None:
    job = {"state": "running", "selected": 0, "moved": 0, "unroutable": 0, "skipped": 0}
    assert progress(job) == "running: selecting messages..."
    assert progress({**job, "selected": 10, "moved": 3, "skipped": 1}) == "running: 4 of 10"
    assert progress({**job, "state": "paused", "selected": 5}) == "paused: 0 of 5"
