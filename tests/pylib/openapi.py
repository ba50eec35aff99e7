"""api/openapi.yaml as a checker of answers: the contract the integration
tests hold every HTTP answer to (conftest.py hooks OpenApiContract.check
into pylib.http), and that test_openapi_contract.py and test_readme.py
read. Standard library and Debian's python3-yaml only.
"""

import json
import os
import re

#
# Every answer http_request receives is checked against the response that
# api/openapi.yaml documents for its operation (method, path template,
# status): the status must be documented there, the Content-Type must be one
# of its media types, its required headers must be present, and a JSON body
# must match its schema. Requests that match no operation are checked
# against the file's x-unmatched-requests (unknown path: 401/404/413;
# unknown method: 401/405 with an Allow header naming the path's methods, or
# 413). conftest.py sets RESPONSE_CHECK for every test; a test opts out with
# @pytest.mark.no_contract_check, a request with check_contract=False, a run
# with RMQS_TEST_CONTRACT=0.
#
# The schemas are checked by a small JSON Schema (2020-12) validator for the
# keywords the file uses; a keyword it does not know is an error, so the
# file cannot come to rely on a rule nobody checks. Needs python3-yaml.
# (pylib.http.RESPONSE_CHECK is where integration/conftest.py hooks the
# check in.)

OPENAPI_PATH = os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "api", "openapi.yaml"))

class ContractError(AssertionError):
    """An answer differs from api/openapi.yaml, or the file is unusable."""


_DATE_TIME_RE = re.compile(
    r"^\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)$")
_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_BASE64_RE = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")


def _json_kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _json_equal(a, b):
    """JSON equality: true is not 1, 1 is 1.0, and containers compare deeply."""
    ka, kb = _json_kind(a), _json_kind(b)
    numbers = ("integer", "number")
    if ka in numbers and kb in numbers:
        return a == b
    if ka != kb:
        return False
    if ka == "array":
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if ka == "object":
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return a == b


class SchemaValidator:
    """JSON Schema 2020-12, the subset api/openapi.yaml uses, with $ref to
    '#/...' pointers of the one document."""

    ANNOTATIONS = frozenset((
        "description", "summary", "title", "example", "examples", "default",
        "deprecated", "readOnly", "writeOnly", "$comment", "contentMediaType"))
    KEYWORDS = frozenset((
        "$ref", "type", "enum", "const", "properties", "required",
        "additionalProperties", "propertyNames", "minProperties",
        "maxProperties", "items", "minItems", "maxItems", "oneOf", "anyOf",
        "allOf", "not", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minLength", "maxLength", "pattern", "format",
        "contentEncoding"))
    FORMATS = frozenset(("date-time", "uuid", "int64", "int32"))

    def __init__(self, document):
        self.doc = document
        self._patterns = {}

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ContractError(f"only local $ref are supported: {ref}")
        node = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise ContractError(f"$ref {ref} points nowhere")
            node = node[part]
        return node

    def check_keywords(self, schema, where="schema"):
        """Raise if schema (recursively) uses a keyword this validator
        does not implement."""
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise ContractError(f"{where}: a schema must be an object")
        unknown = set(schema) - self.KEYWORDS - self.ANNOTATIONS
        unknown = {k for k in unknown if not k.startswith("x-")}
        if unknown:
            raise ContractError(f"{where}: keywords {sorted(unknown)} are not "
                                "supported by the tests' validator")
        if "format" in schema and schema["format"] not in self.FORMATS:
            raise ContractError(f"{where}: format {schema['format']!r} is not "
                                "supported by the tests' validator")
        for key in ("items", "additionalProperties", "propertyNames", "not"):
            if key in schema:
                self.check_keywords(schema[key], f"{where}/{key}")
        for key in ("oneOf", "anyOf", "allOf"):
            for i, sub in enumerate(schema.get(key, ())):
                self.check_keywords(sub, f"{where}/{key}/{i}")
        for name, sub in schema.get("properties", {}).items():
            self.check_keywords(sub, f"{where}/properties/{name}")

    def errors(self, schema, value, where="$"):
        """Every way value fails schema, as 'where: why' strings."""
        out = []
        self._check(schema, value, where, out)
        return out

    def validate(self, schema, value, where="$"):
        errs = self.errors(schema, value, where)
        if errs:
            raise ContractError("; ".join(errs[:10]))

    def _pattern(self, text):
        p = self._patterns.get(text)
        if p is None:
            p = self._patterns[text] = re.compile(text)
        return p

    def _check(self, schema, value, where, out):
        if schema is True:
            return
        if schema is False:
            out.append(f"{where}: no value is allowed here")
            return
        unknown = set(schema) - self.KEYWORDS - self.ANNOTATIONS
        if any(not k.startswith("x-") for k in unknown):
            raise ContractError(f"schema at {where} uses unsupported keywords "
                                f"{sorted(unknown)}")
        if "$ref" in schema:
            self._check(self.resolve(schema["$ref"]), value, where, out)
        kind = _json_kind(value)
        if "type" in schema:
            types = schema["type"]
            types = [types] if isinstance(types, str) else types
            ok = kind in types or (kind == "integer" and "number" in types) or \
                (kind == "number" and "integer" in types and value.is_integer())
            if not ok:
                out.append(f"{where}: {kind} {value!r:.80} is not of type {types}")
                return
        if "const" in schema and not _json_equal(schema["const"], value):
            out.append(f"{where}: {value!r:.80} is not {schema['const']!r}")
        if "enum" in schema and not any(_json_equal(e, value) for e in schema["enum"]):
            out.append(f"{where}: {value!r:.80} is not one of {schema['enum']}")
        for key in ("allOf", "anyOf", "oneOf"):
            if key not in schema:
                continue
            results = [self.errors(sub, value, where) for sub in schema[key]]
            passed = sum(1 for r in results if not r)
            if key == "allOf" and passed != len(results):
                out.extend(e for r in results for e in r)
            elif key == "anyOf" and passed == 0:
                out.append(f"{where}: matches none of anyOf: "
                           + " | ".join("; ".join(r[:3]) for r in results))
            elif key == "oneOf" and passed != 1:
                why = " | ".join("; ".join(r[:3]) for r in results) if passed == 0 \
                    else f"{passed} alternatives match"
                out.append(f"{where}: must match exactly one of oneOf: {why}")
        if "not" in schema and not self.errors(schema["not"], value, where):
            out.append(f"{where}: {value!r:.80} matches a schema it must not")
        if kind == "object":
            self._check_object(schema, value, where, out)
        elif kind == "array":
            self._check_array(schema, value, where, out)
        elif kind == "string":
            self._check_string(schema, value, where, out)
        elif kind in ("integer", "number"):
            self._check_number(schema, value, where, out)

    def _check_object(self, schema, value, where, out):
        props = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                out.append(f"{where}: required member {name!r} is missing")
        extra = schema.get("additionalProperties", True)
        for name, member in value.items():
            if name in props:
                self._check(props[name], member, f"{where}.{name}", out)
            elif extra is False:
                out.append(f"{where}: member {name!r} is not documented")
            elif extra is not True:
                self._check(extra, member, f"{where}.{name}", out)
            if "propertyNames" in schema:
                self._check(schema["propertyNames"], name, f"{where} (name {name!r})", out)
        if len(value) > schema.get("maxProperties", float("inf")):
            out.append(f"{where}: more than {schema['maxProperties']} members")
        if len(value) < schema.get("minProperties", 0):
            out.append(f"{where}: fewer than {schema['minProperties']} members")

    def _check_array(self, schema, value, where, out):
        if len(value) > schema.get("maxItems", float("inf")):
            out.append(f"{where}: more than {schema['maxItems']} items")
        if len(value) < schema.get("minItems", 0):
            out.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                self._check(schema["items"], item, f"{where}[{i}]", out)

    def _check_string(self, schema, value, where, out):
        if len(value) > schema.get("maxLength", float("inf")):
            out.append(f"{where}: longer than {schema['maxLength']} characters")
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: shorter than {schema['minLength']} characters")
        if "pattern" in schema and not self._pattern(schema["pattern"]).search(value):
            out.append(f"{where}: {value!r:.80} does not match {schema['pattern']}")
        fmt = schema.get("format")
        if fmt == "date-time" and not _DATE_TIME_RE.match(value):
            out.append(f"{where}: {value!r:.80} is not an RFC 3339 date-time")
        if fmt == "uuid" and not _UUID_RE.match(value):
            out.append(f"{where}: {value!r:.80} is not a UUID")
        if schema.get("contentEncoding") == "base64" and not _BASE64_RE.match(value):
            out.append(f"{where}: {value!r:.80} is not padded base64")

    def _check_number(self, schema, value, where, out):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: {value} is below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: {value} is above {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(f"{where}: {value} is not above {schema['exclusiveMinimum']}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            out.append(f"{where}: {value} is not below {schema['exclusiveMaximum']}")
        fmt = schema.get("format")
        if fmt == "int64" and not -2**63 <= value < 2**63:
            out.append(f"{where}: {value} is not an int64")
        if fmt == "int32" and not -2**31 <= value < 2**31:
            out.append(f"{where}: {value} is not an int32")


_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


class OpenApiContract:
    """api/openapi.yaml, to look operations up and check answers."""

    # Paths the server answers as another (info.description says so).
    ALIASES = {"/jobs/": "/jobs", "/schedules/": "/schedules",
               "/limits/": "/limits"}

    def __init__(self, path=OPENAPI_PATH):
        try:
            import yaml
        except ImportError:
            raise ContractError("the contract check needs PyYAML: apt-get install "
                                "python3-yaml (tests/run.sh installs it)") from None
        with open(path, encoding="utf-8") as f:
            self.doc = yaml.safe_load(f)
        self.path = path
        self.schemas = SchemaValidator(self.doc)
        self.unmatched = self.doc.get("x-unmatched-requests", {})
        self._templates = []
        for template in self.doc.get("paths", {}):
            rx = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"
            self._templates.append((template.count("{"), template, re.compile(rx)))
        self._templates.sort()  # literal paths win over templated ones

    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            node = self.schemas.resolve(node["$ref"])
        return node

    def path_template(self, path):
        """The documented path template that path (no query) falls under,
        or None. /jobs/ is /jobs, /schedules/ is /schedules, /limits/ is
        /limits (README, http_api.c)."""
        path = path.split("?", 1)[0].split("#", 1)[0]
        path = self.ALIASES.get(path, path)
        for _, template, rx in self._templates:
            if rx.match(path):
                return template
        return None

    def methods(self, template):
        """Upper-case methods documented for a path template."""
        item = self.doc["paths"][template]
        return [m.upper() for m in _METHODS if m in item]

    def responses_for(self, method, path):
        """(what, responses, template): the documented responses for this
        request, and a description of where they come from."""
        template = self.path_template(path)
        if template is None:
            return f"unknown path {path}", self.unmatched.get("unknown-path", {}), None
        item = self.doc["paths"][template]
        m = method.lower()
        if m == "head" and "head" not in item:
            m = "get"
        if m not in item:
            return (f"{method} {template} (method not documented)",
                    self.unmatched.get("unknown-method", {}), template)
        return f"{method} {template}", item[m].get("responses", {}), template

    def check(self, method, path, resp):
        """Raise ContractError if resp (status, headers, raw/body) is not an
        answer api/openapi.yaml documents for method and path."""
        method = method.upper()
        what, responses, template = self.responses_for(method, path)
        status = str(resp.status)
        where = f"{method} {path} -> {resp.status}"
        if status not in responses and "default" not in responses:
            raise ContractError(
                f"{where}: status {status} is not documented in "
                f"{os.path.basename(self.path)} for {what} (documented: "
                f"{', '.join(sorted(responses)) or 'none'}); answer: {resp.raw[:300]!r}")
        spec = self.deref(responses.get(status, responses.get("default")))
        for name, header in (spec.get("headers") or {}).items():
            header = self.deref(header)
            value = resp.headers.get(name)
            if value is None:
                if header.get("required"):
                    raise ContractError(f"{where}: required header {name} is missing")
                continue
            if "schema" in header:
                errs = self.schemas.errors(header["schema"], value, f"header {name}")
                if errs:
                    raise ContractError(f"{where}: {'; '.join(errs)}")
        if status == "405" and template is not None:
            allow = {m.strip() for m in (resp.headers.get("Allow") or "").split(",")}
            documented = set(self.methods(template)) - {"HEAD"}
            if allow != documented:
                raise ContractError(f"{where}: Allow: {resp.headers.get('Allow')!r} "
                                    f"but {template} documents {sorted(documented)}")
        content = spec.get("content") or {}
        ctype = resp.headers.get("Content-Type")
        if not content:
            if resp.raw:
                raise ContractError(f"{where}: documented without a body, got "
                                    f"{resp.raw[:200]!r}")
            return
        if ctype is None:
            if method == "HEAD" and not resp.raw:
                return
            raise ContractError(f"{where}: no Content-Type (documented: {sorted(content)})")
        media = self._media_type(content, ctype)
        if media is None:
            raise ContractError(f"{where}: Content-Type {ctype!r} is not documented "
                                f"(documented: {sorted(content)})")
        if method == "HEAD":
            if resp.raw:
                raise ContractError(f"{where}: a HEAD answer has a body")
            return
        schema = content[media].get("schema")
        if schema is None:
            return
        if media.split(";")[0].strip().lower().endswith("json"):
            value = resp.body
            if value is None:
                try:
                    value = json.loads(resp.raw)
                except ValueError:
                    raise ContractError(f"{where}: body is not JSON: "
                                        f"{resp.raw[:200]!r}") from None
        else:
            value = resp.raw.decode("utf-8")
        errs = self.schemas.errors(schema, value, "body")
        if errs:
            raise ContractError(f"{where}: body does not match "
                                f"{os.path.basename(self.path)} ({what}): "
                                + "; ".join(errs[:8]) + f"; answer: {resp.raw[:400]!r}")

    @staticmethod
    def _params(text):
        """(type, {parameter: value}); names, and the charset's value, in
        lower case (they are case-insensitive); a parameter without '=' is
        kept with the value None, so it counts as a difference."""
        parts = [p.strip() for p in text.split(";")]
        params = {}
        for p in parts[1:]:
            k, eq, v = p.partition("=")
            k = k.strip().lower()
            v = v.strip().strip('"') if eq else None
            params[k] = v.lower() if k == "charset" and v else v
        return parts[0].lower(), params

    def _media_type(self, content, ctype):
        """The documented media type key ctype is: the same type with the
        same parameters, no more and no fewer (the contract declares what
        the server sends)."""
        got = self._params(ctype)
        for key in content:
            if self._params(key) == got:
                return key
        return None


_CONTRACT = None


def openapi_contract():
    """The contract, loaded once per process."""
    global _CONTRACT
    if _CONTRACT is None:
        _CONTRACT = OpenApiContract()
    return _CONTRACT
