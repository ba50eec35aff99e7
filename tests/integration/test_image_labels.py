"""The Dockerfile's OCI labels (read from the file: building the image is
the deploy tests' job): title, description, version, revision, source and
licenses are all set; the version's default is CMakeLists.txt's
project(VERSION) and the license the one api/openapi.yaml states, so
neither drifts. No service, no broker."""

import os
import re

import yaml

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read(name):
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        return f.read()


def runtime_stage(dockerfile):
    """The last stage: what the image is (LABEL and ARG there count)."""
    text = dockerfile.replace("\\\n", " ")
    return re.split(r"^FROM .*$", text, flags=re.M)[-1]


def test_the_image_has_every_oci_label_with_defaults_that_match_the_project():
    stage = runtime_stage(read("Dockerfile"))
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', stage))
    assert set(labels) == {f"org.opencontainers.image.{k}" for k in
                           ("title", "description", "version", "revision",
                            "source", "licenses")}, labels
    args = dict(re.findall(r"^ARG (\w+)=(.*)$", stage, re.M))
    version = re.search(r"project\(rmq-scheduler VERSION (\S+)", read("CMakeLists.txt")).group(1)
    assert labels["org.opencontainers.image.version"] == "${RMQS_VERSION}"
    assert args["RMQS_VERSION"] == version, (args, version)
    assert labels["org.opencontainers.image.revision"] == "${RMQS_REVISION}"
    assert args["RMQS_REVISION"] == "unknown"
    assert labels["org.opencontainers.image.source"] == "${RMQS_SOURCE}"
    assert "RMQS_SOURCE" in args
    license_id = yaml.safe_load(read("api/openapi.yaml"))["info"]["license"]["identifier"]
    assert labels["org.opencontainers.image.licenses"] == license_id
    assert labels["org.opencontainers.image.title"] == "rmq-scheduler"
