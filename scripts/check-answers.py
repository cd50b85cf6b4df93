#!/usr/bin/python3
"""Checks recorded HTTP answers of `inbox serve` against JSON:API 1.0 and the server's own OpenAPI.

DIR holds `openapi.json` (the server's /openapi.json, OpenAPI 3.1) and any number of
`*.answer.json` files (searched recursively), each one object:
  {"method": "GET", "path": "/v1/me/notifications?page[limit]=2", "status": 200,
   "contentType": "application/vnd.api+json", "body": <parsed JSON body, or null: none or not JSON>}

Two checks per answer:
  jsonapi  an `application/vnd.api+json` body against the official JSON:API 1.0 schema
           (Tests/Schemas/jsonapi-1.0.schema.json, draft-06), whatever the path;
  openapi  for a path and method in the document: the response object for the status (exact,
           then a range such as 2XX, then `default`; none is "undocumented status"), a 204 without
           a body, the answer's media type among the response's `content`, and the body against
           that media type's schema (draft 2020-12; `#/components/...` refs resolve in the document).
           Bodies of non-JSON media types are recorded as null and are not validated.
Prints the failures grouped by (method, path template, status, check) with a few error messages
and an example file, the statuses seen for every operation, the operations without a 2xx answer,
and a one-line summary.

usage: scripts/check-answers.py [--require-success] [--allow-missing METHOD PATH]... [--check-formats] [--jobs N] DIR
  --require-success  an operation of the document without any 2xx (or 3xx redirect) answer is a failure
  --allow-missing    except this operation (repeatable), e.g. --allow-missing DELETE /v1/me/sessions
  --check-formats    assert `format` (e.g. uri-reference) where the installed jsonschema can check it
  --jobs N           processes, for 2,000 answers or more (default: one per CPU)
Exit status: 0 no failure, 1 failures, 2 usage error (no DIR, no readable openapi.json, no answers).
Needs python3-jsonschema (4.x; Debian: apt-get install python3-jsonschema).
"""
import argparse
import collections
import json
import os
import re
import sys
import urllib.parse
from pathlib import Path

try:
    import jsonschema
    from jsonschema import Draft6Validator, Draft202012Validator
except ImportError:
    sys.exit("check-answers: needs the Python package jsonschema 4.x (Debian: sudo apt-get install python3-jsonschema)")

try:  # jsonschema >= 4.18 resolves refs through `referencing`; older 4.x through RefResolver.
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012
except ImportError:
    Registry = None

ROOT = Path(__file__).resolve().parent.parent
JSONAPI_SCHEMA = ROOT / "Tests" / "Schemas" / "jsonapi-1.0.schema.json"
JSONAPI_MEDIA_TYPE = "application/vnd.api+json"
# The base URI the OpenAPI document is registered under, so that `#/components/...` refs inside a
# response schema resolve against the whole document. Never fetched.
DOC_URI = "https://openapi.invalid/openapi.json"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
MAX_MESSAGES = 6     # distinct error messages shown per failure group
MESSAGE_CHARS = 300


def jsonschema_version():
    try:
        from importlib.metadata import version
        return version("jsonschema")
    except Exception:
        return getattr(jsonschema, "__version__", "unknown")


def usage_error(parser, sentence):
    parser.print_usage(sys.stderr)
    print(f"check-answers: {sentence}", file=sys.stderr)
    sys.exit(2)


def media_base(media_type):
    """`application/vnd.api+json; charset=utf-8` -> `application/vnd.api+json`."""
    return (media_type or "").split(";", 1)[0].strip().lower()


def media_normal(media_type):
    return ";".join(part.strip() for part in (media_type or "").lower().split(";"))


def is_json_media(base):
    return base == "application/json" or base.endswith("+json")


def pointer(*segments):
    """A URI fragment JSON pointer: ~ and / escaped (RFC 6901), then percent-encoded."""
    return "#" + "".join(
        "/" + urllib.parse.quote(str(s).replace("~", "~0").replace("/", "~1"), safe="") for s in segments)


def truncate(text, limit=MESSAGE_CHARS):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_path(error):
    path = getattr(error, "json_path", None)
    if path is None:
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path


def mismatch(error):
    """The instance is merely not of the kind a branch wants (a type error, or only such errors nested)."""
    if error.validator == "type":
        return True
    return error.validator in ("oneOf", "anyOf") and bool(error.context) and all(mismatch(e) for e in error.context)


def leaf_types(error):
    if error.validator == "type":
        types = error.validator_value
        return list(types) if isinstance(types, list) else [types]
    return [t for e in error.context for t in leaf_types(e)]


def explain(error):
    """`JSON path: message` for one error. A oneOf/anyOf error only says "not valid under any of the
    given schemas": descend into the branch that got furthest into the instance (deepest error,
    then not a mere type mismatch, then fewest errors)."""
    while error.context:
        branches = collections.defaultdict(list)
        for sub in error.context:
            branches[sub.relative_schema_path[0] if sub.relative_schema_path else None].append(sub)
        if all(mismatch(sub) for sub in error.context):
            types = ", ".join(dict.fromkeys(str(t) for t in leaf_types(error)))
            return f"{error_path(error)}: {truncate(repr(error.instance), 120)} is not of any type allowed here ({types})"
        branch = max(branches.values(), key=lambda subs: (
            max(len(sub.absolute_path) for sub in subs),
            not all(mismatch(sub) for sub in subs),
            -len(subs)))
        error = max(branch, key=lambda sub: (len(sub.absolute_path), not mismatch(sub)))
    value = error.validator_value
    if error.validator == "not" and isinstance(value, dict) and isinstance(value.get("anyOf"), list) and all(
            isinstance(b, dict) and list(b) == ["required"] for b in value["anyOf"]):
        names = [n for b in value["anyOf"] for n in b["required"]]
        names = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)
        present = ", ".join(n for b in value["anyOf"] for n in b["required"] if isinstance(error.instance, dict) and n in error.instance)
        return f"{error_path(error)}: must not have a member named {names} (has {present})"
    return f"{error_path(error)}: {truncate(error.message)}"


def describe(errors):
    """A few `JSON path: message` lines for one failed validation, the most relevant first."""
    lines = []
    # Shallow errors first (more is wrong there), then in instance order; oneOf/anyOf last at a level.
    for error in sorted(errors, key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path],
                                               e.validator in ("oneOf", "anyOf"))):
        line = explain(error)
        if line not in lines:
            lines.append(line)
        if len(lines) >= 3:
            break
    return lines


class PathIndex:
    """OpenAPI path templates, matched segment by segment; literal segments win over parameters."""

    def __init__(self, paths):
        self.templates = []
        for template in paths:
            segments = template.split("/")
            pattern = [None if re.fullmatch(r"\{[^/{}]+\}", s) else s for s in segments]
            # Literal segments first, left to right: /v1/me/notifications/read over .../{id}.
            rank = tuple(1 if s is None else 0 for s in pattern)
            self.templates.append((rank, template, pattern))
        self.templates.sort()

    def match(self, path):
        segments = path.split("/")
        for _, template, pattern in self.templates:
            if len(pattern) == len(segments) and all(
                    (p is None and s != "") or p == s for p, s in zip(pattern, segments)):
                return template
        return None


class SchemaValidators:
    """One validator per schema location in the OpenAPI document, built on first use; results memoized per body."""

    def __init__(self, document, format_checker):
        self.document = document
        self.format_checker = format_checker
        self.validators = {}
        self.results = {}
        if Registry is not None:
            self.registry = Registry().with_resource(DOC_URI, DRAFT202012.create_resource(document))

    def validator(self, location):
        validator = self.validators.get(location)
        if validator is None:
            schema = {"$ref": DOC_URI + location}
            kwargs = {"format_checker": self.format_checker} if self.format_checker else {}
            if Registry is not None:
                validator = Draft202012Validator(schema, registry=self.registry, **kwargs)
            else:
                resolver = jsonschema.RefResolver(base_uri=DOC_URI, referrer=self.document)
                validator = Draft202012Validator(schema, resolver=resolver, **kwargs)
            self.validators[location] = validator
        return validator

    def check(self, location, body, text):
        """Error lines (empty when valid) for body (text: its canonical form) against the schema at location."""
        key = (location, text)
        lines = self.results.get(key)
        if lines is None:
            try:
                lines = describe(list(self.validator(location).iter_errors(body)))
            except Exception as problem:  # an unresolvable $ref or an invalid schema in the document
                lines = [f"$: the schema at {location} could not be used: {truncate(f'{type(problem).__name__}: {problem}')}"]
            self.results[key] = lines
        return lines


def inline_refs(node, root, stack=()):
    """The schema with each local `$ref` replaced by what it names (draft-06 ignores a $ref's
    siblings, so this changes nothing it accepts); raises ValueError on a recursive or other ref."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#/") or ref in stack:
                raise ValueError(f"cannot inline $ref {ref}")
            target = root
            for part in ref[2:].split("/"):
                target = target[urllib.parse.unquote(part).replace("~1", "/").replace("~0", "~")]
            return inline_refs(target, root, stack + (ref,))
        return {k: v if k in ("enum", "const", "default", "examples") or (k == "definitions" and node is root)
                else inline_refs(v, root, stack) for k, v in node.items()}
    if isinstance(node, list):
        return [inline_refs(v, root, stack) for v in node]
    return node


class JSONAPIValidator:
    def __init__(self, schema, format_checker):
        Draft6Validator.check_schema(schema)
        kwargs = {"format_checker": format_checker} if format_checker else {}
        try:  # the same schema without its $refs validates about a third faster
            schema = inline_refs(schema, schema)
        except (ValueError, KeyError, TypeError):
            pass
        self.validator = Draft6Validator(schema, **kwargs)
        self.results = {}

    def check(self, body, text):
        key = text
        lines = self.results.get(key)
        if lines is None:
            lines = describe(list(self.validator.iter_errors(body)))
            self.results[key] = lines
        return lines


def canonical(body):
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def find_response(responses, status):
    """The response object for status and the key it was found under: exact, then 2XX-style range, then default."""
    exact = str(status)
    if exact in responses:
        return exact, responses[exact]
    for key in responses:
        if len(key) == 3 and key[1:].upper() == "XX" and key[0] == exact[:1]:
            return key, responses[key]
    if "default" in responses:
        return "default", responses["default"]
    return None, None


def find_media(content, content_type):
    """The documented media type key for the answer's Content-Type: exact, then without parameters, then ranges."""
    normal, base = media_normal(content_type), media_base(content_type)
    by_normal = {media_normal(k): k for k in content}
    if normal in by_normal:
        return by_normal[normal]
    for key in content:
        if media_base(key) == base:
            return key
    for key in content:
        if media_base(key) == base.split("/", 1)[0] + "/*":
            return key
    for key in content:
        if media_base(key) == "*/*":
            return key
    return None


def resolve_local(document, node, location):
    """A path item or response object may itself be a $ref (#/components/responses/X): the object
    it names and that object's location (a list of pointer segments), where its schemas are."""
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/") and seen < 20:
        target, location = document, []
        for part in node["$ref"][2:].split("/"):
            part = urllib.parse.unquote(part).replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
            location.append(part)
        node, seen = target, seen + 1
    return node, location


class Checker:
    """Checks one answer file at a time; holds the document, the path index and the validators."""

    def __init__(self, document, jsonapi_schema, check_formats, folder, ignored=()):
        format_checker = None
        if check_formats:
            format_checker = getattr(Draft202012Validator, "FORMAT_CHECKER", None) or jsonschema.FormatChecker()
        self.document = document
        self.folder = folder
        self.ignored = tuple(ignored)
        self.jsonapi = JSONAPIValidator(jsonapi_schema, format_checker)
        self.schemas = SchemaValidators(document, format_checker)
        self.index = PathIndex(document["paths"])
        self.operations = {}  # (METHOD, template) -> (operation object, its location), in document order
        for template, item in document["paths"].items():
            item, location = resolve_local(document, item, ["paths", template])
            if isinstance(item, dict):
                for method in METHODS:
                    if isinstance(item.get(method), dict):
                        self.operations[(method.upper(), template)] = (item[method], location + [method])

    def check(self, file):
        """(file name, path, (METHOD, template) or None, status, [((method, template, status, check), lines)])."""
        name = str(file.relative_to(self.folder))
        try:
            answer = json.loads(file.read_text(encoding="utf-8"))
            if not isinstance(answer, dict) or not all(k in answer for k in ("method", "path", "status")):
                raise ValueError("not an object with method, path, status, contentType and body")
            method = str(answer["method"]).upper()
            raw_path = str(answer["path"])
            status = int(answer["status"])
            content_type = answer.get("contentType") or ""
            body = answer.get("body")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as problem:
            return name, "", None, None, [(("?", "(unreadable answer)", "?", "answer"),
                                           [truncate(f"{type(problem).__name__}: {problem}")])]
        path = urllib.parse.urlsplit(raw_path).path if "://" in raw_path else raw_path.split("?", 1)[0].split("#", 1)[0]
        # A HEAD answer has no body by definition; a route the tests add for themselves is no
        # route of the product.
        if method == "HEAD" or any(path.startswith(prefix) for prefix in self.ignored):
            return name, raw_path, None, None, []
        template = self.index.match(path)
        operation, operation_location = self.operations.get((method, template), (None, None))
        label = template if operation is not None else "(not in the document)"
        failures = []
        text = canonical(body)  # the key under which validation results are memoized

        # (a) JSON:API 1.0, for every JSON:API answer.
        if media_base(content_type) == JSONAPI_MEDIA_TYPE:
            lines = ["$: the body is missing or not JSON"] if body is None else self.jsonapi.check(body, text)
            if lines:
                failures.append(((method, label, status, "jsonapi"), lines))

        # (b) the operation's documented response; a sparse fieldset (fields[TYPE]) leaves out
        # members the document says are there, as JSON:API has it.
        if operation is None:
            return name, raw_path, None, status, failures
        if "fields[" in urllib.parse.unquote(raw_path.partition("?")[2]):
            return name, raw_path, (method, template), status, failures
        lines = []
        responses = operation.get("responses") or {}
        key, response = find_response(responses, status)
        response, response_location = resolve_local(self.document, response, operation_location + ["responses", key])
        if response is None:
            lines = [f"undocumented status {status} (documented: {', '.join(responses) or 'none'}; no default)"]
        elif status == 204:
            if body is not None:
                lines = ["$: a 204 answer has a body"]
        else:
            content = response.get("content") or {}
            if not content:
                if body is not None:
                    lines = [f"$: the {key} response documents no content, but the answer has a body ({content_type or 'no Content-Type'})"]
            elif not content_type:
                lines = [f"no Content-Type; the {key} response documents {', '.join(content)}"]
            else:
                media = find_media(content, content_type)
                if media is None:
                    lines = [f"media type {content_type} not documented for {key} (documented: {', '.join(content)})"]
                elif isinstance(content[media], dict) and "schema" in content[media]:
                    if body is None and is_json_media(media_base(media)):
                        lines = ["$: the body is missing or not JSON"]
                    elif body is not None or is_json_media(media_base(media)):
                        lines = self.schemas.check(pointer(*response_location, "content", media, "schema"), body, text)
                    # else: a non-JSON body, recorded as null; nothing to validate.
        if lines:
            failures.append(((method, template, status, "openapi"), lines))
        return name, raw_path, (method, template), status, failures


WORKER = None


def check_in_worker(file):
    return WORKER.check(file)


def main():
    parser = argparse.ArgumentParser(
        prog="check-answers.py",
        description="Check recorded answers (*.answer.json) against JSON:API 1.0 and DIR/openapi.json.")
    parser.add_argument("dir", metavar="DIR", help="folder with openapi.json and *.answer.json files")
    parser.add_argument("--require-success", action="store_true",
                        help="an operation without any recorded 2xx (or 3xx redirect) answer is a failure")
    parser.add_argument("--allow-missing", nargs=2, action="append", default=[], metavar=("METHOD", "PATH"),
                        help="with --require-success, this operation may lack a 2xx answer (repeatable)")
    parser.add_argument("--ignore-prefix", action="append", default=[], metavar="PATH",
                        help="answers to paths under this prefix are not checked (the tests' own routes; repeatable)")
    parser.add_argument("--check-formats", action="store_true",
                        help="assert `format` keywords where the installed jsonschema has a checker for them")
    parser.add_argument("--jobs", type=int, default=0, metavar="N",
                        help="processes for 2,000 answers or more (default: one per CPU)")
    parser.add_argument("--jsonapi-schema", default=str(JSONAPI_SCHEMA), metavar="FILE",
                        help="the JSON:API schema (default: Tests/Schemas/jsonapi-1.0.schema.json)")
    args = parser.parse_args()

    folder = Path(args.dir)
    if not folder.is_dir():
        usage_error(parser, f"{folder} is not a folder.")
    try:
        document = json.loads((folder / "openapi.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        usage_error(parser, f"{folder} has no openapi.json (the server's GET /openapi.json).")
    except (OSError, ValueError) as problem:
        usage_error(parser, f"{folder}/openapi.json could not be read as JSON: {problem}")
    if not isinstance(document, dict) or not isinstance(document.get("paths"), dict):
        usage_error(parser, f"{folder}/openapi.json has no `paths` object; is it an OpenAPI document?")
    try:
        jsonapi_schema = json.loads(Path(args.jsonapi_schema).read_text(encoding="utf-8"))
    except (OSError, ValueError) as problem:
        usage_error(parser, f"the JSON:API schema {args.jsonapi_schema} could not be read: {problem}")
    answers = sorted(p for p in folder.rglob("*.answer.json") if p.is_file())
    if not answers:
        usage_error(parser, f"{folder} has no *.answer.json files.")

    checker = Checker(document, jsonapi_schema, args.check_formats, folder, args.ignore_prefix)
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    if jobs > 1 and len(answers) >= 2000:
        import multiprocessing
        global WORKER
        WORKER = checker  # inherited by the forked workers, each builds its own validators
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            records = list(pool.imap(check_in_worker, answers, chunksize=64))
    else:
        records = [checker.check(file) for file in answers]

    # (method, template, status, check) -> {"count", "example", "messages": Counter}
    groups = collections.OrderedDict()
    seen = collections.defaultdict(collections.Counter)  # operation -> Counter of statuses
    failed_answers = 0
    for name, raw_path, operation, status, failures in records:
        if operation is not None:
            seen[operation][status] += 1
        for key, lines in failures:
            group = groups.setdefault(key, {"count": 0, "example": (name, raw_path), "messages": collections.Counter()})
            group["count"] += 1
            for line in lines:
                group["messages"][line] += 1
        failed_answers += bool(failures)
    operations = checker.operations

    # The document's request examples: every body has one, and each is valid against its schema.
    example_problems = []
    for (method, template), (operation, location) in operations.items():
        content = (operation.get("requestBody") or {}).get("content") or {}
        for media, entry in content.items():
            if media == "multipart/form-data" or not isinstance(entry, dict):
                continue
            schema = entry.get("schema") or {}
            examples = schema.get("examples") if isinstance(schema, dict) else None
            if not examples:
                example_problems.append(f"{method} {template} {media}: no example of its body")
                continue
            for index, example in enumerate(examples):
                schema_location = pointer(*location, "requestBody", "content", media, "schema")
                for line in checker.schemas.check(schema_location, example, canonical(example)):
                    example_problems.append(f"{method} {template} {media}: example {index}: {line}")

    # Coverage.
    # A redirect is the success of a route that answers one (Apple's return).
    missing_success = [op for op in operations if not any(200 <= s < 400 for s in seen[op])]
    allowed = {(m.upper(), p) for m, p in args.allow_missing}
    for m, p in sorted(allowed - set(operations)):
        print(f"note: --allow-missing {m} {p} names no operation of the document")
    required_missing = [op for op in missing_success if op not in allowed] if args.require_success else []

    if groups or required_missing or example_problems:
        print(f"FAILURES ({len(groups)} groups)")
        for line in example_problems:
            print(f"  [examples] {line}")
        for (method, label, status, check), group in groups.items():
            example, example_path = group["example"]
            print(f"  {method} {label} {status} [{check}]: {group['count']} answer(s), e.g. {example}"
                  + (f" ({truncate(example_path, 120)})" if example_path else ""))
            messages = group["messages"].most_common()
            for line, count in messages[:MAX_MESSAGES]:
                print(f"      {line}" + (f"  [×{count}]" if group["count"] > 1 else ""))
            if len(messages) > MAX_MESSAGES:
                print(f"      … and {len(messages) - MAX_MESSAGES} other message(s)")
        if required_missing:
            print(f"  [coverage]: {len(required_missing)} operation(s) without any 2xx or 3xx answer, listed under COVERAGE"
                  " (--allow-missing METHOD PATH exempts one)")
        print()

    print("COVERAGE (statuses seen per operation)")
    width = max((len(t) for _, t in operations), default=0)
    for method, template in operations:
        statuses = seen[(method, template)]
        text = " ".join(f"{s}×{n}" for s, n in sorted(statuses.items())) or "-"
        print(f"  {method:<7} {template:<{width}}  {text}")
    if missing_success:
        print(f"operations without a 2xx or 3xx answer ({len(missing_success)}):")
        for op in missing_success:
            print(f"  {op[0]} {op[1]}" + ("  (allowed)" if op in allowed else ""))
    print()

    failures = failed_answers + len(required_missing) + len(example_problems)
    answered = sum(1 for op in operations if seen[op])
    succeeded = len(operations) - len(missing_success)
    detail = f"{failed_answers} answers failing a check, {len(example_problems)} request examples missing or invalid"
    if args.require_success:
        detail += f", {len(required_missing)} operations without a required 2xx"
    print(f"check-answers: {len(answers)} answers checked, {failures} failures ({detail}), "
          f"operations covered: {answered}/{len(operations)} answered, {succeeded}/{len(operations)} with a 2xx "
          f"(jsonschema {jsonschema_version()}, refs via {'referencing' if Registry is not None else 'RefResolver'})")
    return 1 if failures else 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quietly, when piped into head
    sys.exit(main())
