"""tests/pylib: the Python scaffolding every harness of this repo shares.

tests/integration (through helpers.py and conftest.py), tests/bench/bench.py
and tests/deploy/conftest.py import it, so there is one Service class, one
pika consumer, one HTTP client, one OpenAPI checker and one way to wait on a
condition with a deadline. Each harness keeps what is its own (fixtures,
wrk and perf counters, docker).

  runenv    env(): what tests/run.sh exported
  wait      free_port(s), port_open, wait_until
  pg        the run's PostgreSQL: a database per service, SQL via psql
  procs     process RSS, stopping a child by PID, go_build
  times     RFC 3339 parsing and formatting, now in ms
  http      one request (JSON or text answers), a chunked POST, a keep-alive client
  service   the real rmq-scheduler binary with its own port and database
  load      client threads posting jobs while a test kills or stops the service
  startup   the binary started on settings it must refuse, and the refusal checked
  tmpfs     a 2 MiB tmpfs with a filler file: a disk to fill
  schedules PUT /schedules, a schedule's runs, every run checked to fire once
  metrics   GET /metrics as {series: value}, one series' value
  amqp      a pika consumer on its own thread, amqp_params (pika 1.2 fixes)
  rabbit    the suite's RabbitMQ node (Broker) and private nodes (RabbitNode)
  openapi   api/openapi.yaml as a checker of answers

Standard library, Debian's python3-pika and python3-yaml only; everything
talks to loopback. The harnesses put tests/ on sys.path (helpers.py,
deploy/conftest.py, bench.py) and import it as `pylib`.
"""
