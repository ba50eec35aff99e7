"""README.md's quick start, as the tests that run it read it: the two ```sh
blocks of the "Quick start" section (the first terminal: deploy/run-local.sh;
the second: declare a queue, schedule, take the message off), and the one
rewrite that lets them run beside other tests: free ports instead of the
defaults. Used by tests/integration/test_readme_quickstart.py (on this
machine) and tests/deploy/test_fresh_machine.py (in a bare Debian 12
container)."""

from pylib import markdown

QUICKSTART_MESSAGE = "hello from rmq-scheduler"


def quickstart_blocks(readme):
    """The two sh blocks of the Quick start section of the file readme
    (before its first subheading)."""
    _, text = markdown.section(readme, "Quick start", subsections=False)
    blocks = [b for _, b in markdown.fenced_blocks(text, "sh")]
    assert len(blocks) == 2, f"expected two sh blocks (two terminals), got {blocks}"
    return blocks


def local_ports_env(ports, node, data, build):
    """run-local.sh's documented variables for these ports (a dict with
    amqp, management, dist, epmd and http), node name and folders."""
    return {"RMQS_LOCAL_AMQP_PORT": str(ports["amqp"]),
            "RMQS_LOCAL_MANAGEMENT_PORT": str(ports["management"]),
            "RMQS_LOCAL_DIST_PORT": str(ports["dist"]),
            "RMQS_LOCAL_EPMD_PORT": str(ports["epmd"]),
            "RMQS_LOCAL_NODE": node, "RMQS_LOCAL_DATA": data,
            "RMQS_LOCAL_BUILD": build,
            "RMQS_LISTEN": f"127.0.0.1:{ports['http']}"}


def second_terminal(block, listen, management_port):
    """The second block with only host:port values replaced: the service's
    address, and rabbitmqadmin's port (the README says --port is needed when
    RMQS_LOCAL_MANAGEMENT_PORT moves it)."""
    assert "127.0.0.1:8080" in block and "rabbitmqadmin " in block, block
    block = block.replace("127.0.0.1:8080", listen)
    return block.replace("rabbitmqadmin ", f"rabbitmqadmin --port={management_port} ")


def delivered_row(stdout):
    """The rabbitmqadmin row of the message, or None."""
    rows = [ln for ln in stdout.splitlines() if QUICKSTART_MESSAGE in ln and "|" in ln]
    return rows[-1] if rows else None
