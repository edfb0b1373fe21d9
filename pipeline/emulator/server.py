"""The aiohttp application: routes, auth, the order of checks, stats.

Routes (``{tail}`` is ``MODEL:generateContent`` or ``MODEL:streamGenerateContent``):

* ``POST /v1beta/models/{tail}``, ``POST /v1/models/{tail}``: Developer API. Key in the
  ``x-goog-api-key`` header or ``?key=``; none -> 403 PERMISSION_DENIED, unknown -> 400
  API_KEY_INVALID.
* ``POST /{v1|v1beta1}/projects/{p}/locations/{l}/publishers/{pub}/models/{tail}`` and the
  endpoint-less ``/{v1|v1beta1}/publishers/{pub}/models/{tail}``: Vertex. ``Authorization:
  Bearer``; otherwise 401 UNAUTHENTICATED.
* ``POST /{v1beta|v1}/interactions``: the Interactions API, answered by the same checks and
  builder as generateContent (:mod:`pipeline.emulator.interactions`); Developer API key.
* ``POST /v1beta/models/{model}:embedContent`` / ``:batchEmbedContents``: Developer API
  embeddings, deterministic (:mod:`pipeline.emulator.embeddings`).
* ``GET|HEAD /grounding-api-redirect/{token}``: 302 to the publisher page (or to one of
  ``redirect_locations``); 404 once ``redirect_ttl_s`` has passed since issue (or for a token
  that does not verify); 403 for a fixed ``redirect_forbidden_share`` of tokens. A request
  that carries an ``Authorization`` header is counted (``redirects.with_authorization``): a
  resolver must never send one.
* ``POST /token``: OAuth JWT-bearer grant (see :mod:`pipeline.emulator.oauth`).
* ``GET /emulator/stats`` (see :mod:`pipeline.emulator.stats`), ``POST /emulator/reset``
  (zero the counters and empty the quota windows).
* The Batch API and the Files API it reads (``/upload/v1beta/files``,
  ``models/{m}:batchGenerateContent``, ``/v1beta/batches...`` with ``DELETE``, result
  downloads): see
  :mod:`pipeline.emulator.batch`. Developer API key as above.
* Vertex batch prediction (``/{v1|v1beta1}/projects/{p}/locations/{l}/batchPredictionJobs``,
  ``.../{id}``, ``.../{id}:cancel``, ``DELETE .../{id}``): see
  :mod:`pipeline.emulator.prediction`; and the Cloud
  Storage JSON API subset it reads and writes (``/upload/storage/v1/b/{bucket}/o``,
  ``/storage/v1/b/{bucket}/o[/{object}]``, ``/download/storage/v1/...``): see
  :mod:`pipeline.emulator.storage`. Both take a Bearer token, as the Vertex surface.

Order of checks for generateContent, as Google's front end orders them: auth, model name,
body parse (proto JSON), tool/model/schema compatibility (400s), injected fault (500, 503,
504, HTML 502, hang), quota (429; a rejected request uses no quota), latency, answer
(possibly truncated). Only requests that pass validation count towards quotas.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from pipeline.emulator import (
    draws,
    embeddings,
    error_bodies,
    faults,
    interactions,
    models,
    oauth,
    redirects,
    responses,
)
from pipeline.emulator.batch import BatchService
from pipeline.emulator.billing import BillingService
from pipeline.emulator.clock import SYSTEM_CLOCK, Clock
from pipeline.emulator.config import EmulatorConfig
from pipeline.emulator.corpus import SOURCES
from pipeline.emulator.prediction import PredictionService
from pipeline.emulator.quotas import Quotas
from pipeline.emulator.request import DEVELOPER, SEARCH_TOOLS, VERTEX, GenerateRequest, parse
from pipeline.emulator.stats import Stats
from pipeline.emulator.storage import StorageError, StorageService

__all__ = [
    "build_app",
]

FAULT_429_NOMINAL_RPM = 1000  # the quotaValue an injected 429 names when no rpm is set
_JSON = error_bodies.JSON_CONTENT_TYPE
_JSONL = "application/x-ndjson"
_HTML = error_bodies.HTML_CONTENT_TYPE


class Emulator:
    """Per-app state: config, clock, keys, counters, quota windows, the request sequence.

    ``answering`` is open unless a test holds it (:meth:`hold`): then every generateContent
    request is counted on arrival and waits until :meth:`release`, so a test can line up
    several clients before any of them gets an answer.
    """

    def __init__(self, config: EmulatorConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.answering = asyncio.Event()
        self.answering.set()
        self.seed_key = draws.seed_key(config.seed)
        self.redirect_key = redirects.redirect_key(self.seed_key)
        self.token_key = oauth.token_key(self.seed_key)
        self.stats = Stats()
        self.quotas = Quotas(config)
        self.plan = faults.FaultPlan(config, self.seed_key)
        self.storms = faults.Storms(config, clock)
        self.seq = 0
        self.batch = BatchService(config, clock, self.seed_key, self.redirect_key, self._take_seq)
        self.storage = StorageService(config, clock, self.seed_key)
        self.billing = BillingService(config.billed_query_fanout, config.billing_prices_file)
        self.prediction = PredictionService(
            config, clock, self.seed_key, self.redirect_key, self._take_seq, self.storage
        )

    def _take_seq(self, n: int) -> int:
        """Reserve ``n`` response sequence numbers (a batch's rows); the first of them."""
        first = self.seq
        self.seq += n
        return first

    def snapshot(self) -> dict[str, Any]:
        """The counters, with the Batch API's (``"batch"``), Vertex batch prediction's
        (``"prediction"``: ``prediction_jobs_created``, ...) and Cloud Storage's
        (``"storage"``: ``objects_uploaded``, ...)."""
        return {
            **self.stats.snapshot(),
            "batch": self.batch.snapshot(),
            "prediction": self.prediction.snapshot(),
            "storage": self.storage.snapshot(),
        }

    def reset(self) -> None:
        self.stats.reset()
        self.quotas.reset()
        self.batch.counts.clear()
        self.prediction.counts.clear()
        self.storage.counts.clear()

    def hold(self) -> None:
        """Keep generateContent requests waiting (counted) until :meth:`release`."""
        self.answering.clear()

    def release(self) -> None:
        self.answering.set()

    # --- helpers ----------------------------------------------------------------------

    def _error(self, kind: str, e: error_bodies.ApiError) -> web.Response:
        self.stats.errors[e.kind or e.status] += 1
        self.stats.request(kind, e.code)
        headers = {"Content-Type": _JSON}
        retry_after = self.storms.retry_after() if e.code == 429 else None
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        return web.Response(body=e.body(), status=e.code, headers=headers)

    def _ok(self, kind: str, body: bytes, content_type: str = _JSON) -> web.Response:
        self.stats.request(kind, 200)
        return web.Response(body=body, status=200, headers={"Content-Type": content_type})

    # --- generateContent (and the Interactions API, through it) -------------------------

    async def interaction(self, request: web.Request) -> web.Response:
        """``POST /{version}/interactions``: translated, answered as generateContent, reshaped."""
        kind = interactions.INTERACTIONS
        key = request.headers.get("x-goog-api-key") or request.query.get("key")
        try:
            if not key:
                raise error_bodies.api_key_missing()
            if key not in self.config.api_keys:
                raise error_bodies.api_key_invalid()
            via = interactions.translate(await request.read())
            version = request.path.split("/", 2)[1]
            return await self._generate(request, DEVELOPER, version, "", "", via=via)
        except error_bodies.ApiError as e:
            response = self._error(kind, e)
            if isinstance(response.body, bytes):
                response.body = interactions.error_body(response.body)
            return response

    async def developer(self, request: web.Request) -> web.Response:
        key = request.headers.get("x-goog-api-key") or request.query.get("key")
        try:
            if not key:
                raise error_bodies.api_key_missing()
            if key not in self.config.api_keys:
                raise error_bodies.api_key_invalid()
            version = request.path.split("/", 2)[1]
            model, _, method = request.match_info["tail"].partition(":")
            if method == "batchGenerateContent":
                return await self.batch.create(request, model)
            if method in ("embedContent", "batchEmbedContents"):
                return await self._embed(request, model, method)
            return await self._generate(request, DEVELOPER, version, "", "")
        except error_bodies.ApiError as e:
            return self._error(DEVELOPER, e)

    async def _embed(self, request: web.Request, model: str, method: str) -> web.Response:
        """Deterministic embeddings (:mod:`pipeline.emulator.embeddings`)."""
        if not model.startswith(("gemini-embedding", "text-embedding", "embedding-")):
            raise error_bodies.model_not_found(model, request.path.split("/", 2)[1])
        try:
            data = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise error_bodies.invalid_json("Unexpected token.") from None
        self.stats.by_model[model] += 1
        return self._ok("embed", orjson.dumps(embeddings.embed(self.seed_key, data, method)))

    def _batch_route(self, handler: Any) -> Any:
        """A Batch/Files API handler behind the Developer API's key check (an upload URL
        carries its own ``upload_id`` and needs none, as at Google)."""

        async def route(request: web.Request) -> web.StreamResponse:
            key = request.headers.get("x-goog-api-key") or request.query.get("key")
            try:
                if "upload_id" not in request.query:
                    if not key:
                        raise error_bodies.api_key_missing()
                    if key not in self.config.api_keys:
                        raise error_bodies.api_key_invalid()
                response = await handler(request)
            except error_bodies.ApiError as e:
                return self._error("batch", e)
            self.stats.request("batch", response.status)
            return response

        return route

    def _bearer(self, request: web.Request, version: str = "v1") -> None:
        """The Vertex surface's auth check: a valid Bearer token, or the 401 Google sends."""
        auth = request.headers.get("Authorization", "")
        if not auth.lower().startswith("bearer "):
            has_key = request.headers.get("x-goog-api-key") or request.query.get("key")
            raise error_bodies.vertex_unauthenticated(
                "API_KEY_ONLY" if has_key else "CREDENTIALS_MISSING", version
            )
        reason = oauth.check(
            self.token_key, auth[7:].strip(), self.clock.time(), self.config.bearer_tokens
        )
        if reason is not None:
            raise error_bodies.vertex_unauthenticated(reason, version)

    def _prediction_route(self, handler: Any) -> Any:
        """A ``batchPredictionJobs`` handler behind the Vertex Bearer check."""

        async def route(request: web.Request) -> web.StreamResponse:
            try:
                self._bearer(request, request.match_info.get("version", "v1"))
                response = await handler(request)
            except error_bodies.ApiError as e:
                return self._error("prediction", e)
            self.stats.request("prediction", response.status)
            return response

        return route

    def _storage_route(self, handler: Any) -> Any:
        """A Cloud Storage handler behind the Bearer check; errors in the JSON API's shape.
        A resumable session URI carries its own ``upload_id`` and needs no token."""

        async def route(request: web.Request) -> web.StreamResponse:
            try:
                if "upload_id" not in request.query:
                    self._bearer(request)
                response = await handler(request)
            except error_bodies.ApiError as e:
                return self._error("storage", e)
            except StorageError as e:
                self.stats.errors[e.reason] += 1
                self.stats.request("storage", e.code)
                return web.Response(body=e.body(), status=e.code, headers={"Content-Type": _JSON})
            self.stats.request("storage", response.status)
            return response

        return route

    async def vertex(self, request: web.Request) -> web.Response:
        version = request.match_info["version"]
        try:
            self._bearer(request, version)
            return await self._generate(
                request,
                VERTEX,
                version,
                request.match_info.get("project", ""),
                request.match_info.get("location", "global"),
            )
        except error_bodies.ApiError as e:
            return self._error(VERTEX, e)

    async def _generate(
        self,
        request: web.Request,
        surface: str,
        version: str,
        project: str,
        location: str,
        *,
        via: interactions.Translated | None = None,
    ) -> web.Response:
        """``via``: an Interactions request, translated (its answer is reshaped back)."""
        if via is None:
            model, _, method = request.match_info["tail"].partition(":")
        else:
            model, method = via.model, "generateContent"
        kind = surface if via is None else interactions.INTERACTIONS
        vertex = surface == VERTEX
        traits = self._model_traits(request, model, method, vertex, version, project, location)
        seq = self.seq
        self.seq += 1
        req = parse(await request.read() if via is None else via.body, surface)
        st = self.stats
        st.by_model[model] += 1
        for t in req.tools or ("none",):
            st.by_tool[t] += 1
        await self.answering.wait()
        _refuse_unsupported(req, traits)
        prompt_tokens = responses.tokens(req.prompt_bytes)
        if prompt_tokens > self.config.input_token_limit:
            raise error_bodies.invalid_argument(
                f"The input token count ({prompt_tokens}) exceeds the maximum number of tokens"
                f" allowed ({self.config.input_token_limit}).",
                kind="input_too_long",
            )

        if self.storms.overloaded():
            raise error_bodies.unavailable(kind="storm_503")
        if not vertex and self.storms.bare_429(req.grounding is not None):
            raise error_bodies.quota_exceeded("grounded_rpd", model, 0, None, kind="bare_429")
        fault = self.plan.fault(seq)
        if fault is not None:
            faulted = await self._fault(fault, model, kind)
            if faulted is not None:
                return faulted
        self._admit(req, model, prompt_tokens, vertex)
        delay = self.plan.latency_s(seq)
        if delay:
            await asyncio.sleep(delay)

        ctx = responses.Context(
            config=self.config,
            seed_key=self.seed_key,
            redirect_key=self.redirect_key,
            traits=traits,
            request=req,
            vertex=vertex,
            base_url=_links_base(request, self.config.redirect_userinfo),
            seq=seq,
            now=self.clock.time(),
            project=project,
            location=location,
        )
        built = responses.build(ctx)
        self.billing.served(
            built.body,
            model=model,
            vertex=vertex,
            project=project,
            labels=dict(req.labels),
            grounding_tool=req.grounding_tool,
            now=self.clock.time(),
            seq=seq,
        )
        st.responses[built.outcome] += 1
        if built.truth:
            st.verification.update(built.truth)
        if built.body.get("usageMetadata", {}).get("promptTokenCount", 0) < 0:
            st.responses["negative_usage"] += 1
        body = built.body if via is None else via.reshape(built.body, seq, ctx.now)
        payload, content_type = _framed(orjson.dumps(body), method, request)
        if fault == "fault_truncate":
            st.responses["truncated"] += 1
            payload = payload[: self.plan.truncate_at(seq, len(payload))]
        return self._ok(kind, payload, content_type)

    def _model_traits(
        self,
        request: web.Request,
        model: str,
        method: str,
        vertex: bool,
        version: str,
        project: str,
        location: str,
    ) -> models.ModelTraits:
        """The model's traits, or the 404 the real API sends for an unknown model or method."""
        traits = models.traits(model)
        publisher = request.match_info.get("publisher", "google")
        if traits is not None and models.shut_down(model, self.config.shutdowns, self.clock.time()):
            self.stats.responses["model_shut_down"] += 1
            traits = None
        if traits is None or publisher != "google":
            if vertex:
                raise error_bodies.publisher_model_not_found(
                    f"projects/{project}/locations/{location}/publishers/{publisher}/models/{model}"
                )
            raise error_bodies.model_not_found(model, version)
        if method not in ("generateContent", "streamGenerateContent"):
            raise error_bodies.ApiError(
                404, "NOT_FOUND", f"Method {method!r} is not found.", kind="method_not_found"
            )
        return traits

    async def _fault(self, fault: str, model: str, surface: str) -> web.Response | None:
        """Raise (or answer with) the planned fault; None for a fault applied to the answer."""
        self.stats.faults[fault] += 1
        if fault == "fault_429":
            limit = self.config.quota_for(model).rpm or FAULT_429_NOMINAL_RPM
            raise error_bodies.quota_exceeded(
                "rpm", model, limit, self.config.fault_429_retry_delay_s
            )
        if fault == "fault_500":
            raise error_bodies.internal()
        if fault == "fault_503":
            raise error_bodies.unavailable()
        if fault == "fault_504":
            raise error_bodies.deadline_exceeded()
        if fault == "fault_502_html":
            self.stats.request(surface, 502)
            return web.Response(
                body=error_bodies.BAD_GATEWAY_HTML, status=502, headers={"Content-Type": _HTML}
            )
        if fault == "fault_hang":
            await asyncio.sleep(self.config.hang_s)  # cancelled when the client leaves
            raise error_bodies.deadline_exceeded()
        return None  # fault_truncate: cuts the answer's body

    def _admit(self, req: GenerateRequest, model: str, prompt_tokens: int, vertex: bool) -> None:
        """Count the request against the model's quotas, or raise the 429 the API sends."""
        rejection = self.quotas.admit(
            model,
            prompt_tokens,
            req.grounding is not None,
            self.clock.monotonic(),
        )
        if rejection is None:
            return
        self.stats.quota[rejection.bucket] += 1
        if vertex:
            raise error_bodies.vertex_quota_exceeded()
        raise error_bodies.quota_exceeded(
            rejection.bucket, model, rejection.limit, rejection.retry_after_s
        )

    # --- redirects, token, stats ------------------------------------------------------

    async def redirect(self, request: web.Request) -> web.Response:
        d = redirects.decode(self.redirect_key, request.match_info["token"])
        now_ms = self.clock.time() * 1000
        st = self.stats
        if "Authorization" in request.headers:
            st.redirects_with_authorization += 1
        if (
            d is None
            or d.destination >= len(SOURCES)
            or now_ms - d.issued_ms > self.config.redirect_ttl_s * 1000
        ):
            status, body = 404, error_bodies.NOT_FOUND_HTML
        elif d.forbidden_draw < self.config.redirect_forbidden_share:
            status, body = 403, error_bodies.FORBIDDEN_HTML
        else:
            st.redirects["302"] += 1
            st.request("redirect", 302)
            hostile = sorted(self.config.redirect_locations)
            location = (
                hostile[d.destination % len(hostile)] if hostile else SOURCES[d.destination].url
            )
            return web.Response(status=302, headers={"Location": location, "Content-Type": _HTML})
        st.redirects[str(status)] += 1
        st.request("redirect", status)
        return web.Response(body=body, status=status, headers={"Content-Type": _HTML})

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.stats.token_requests += 1
        if self.config.token_hang_s:
            await asyncio.sleep(self.config.token_hang_s)  # cancelled when the client leaves
        now = self.clock.time()
        try:
            if form.get("grant_type") != oauth.JWT_BEARER:
                raise oauth.GrantError("unsupported_grant_type", "Invalid grant_type.")
            assertion = form.get("assertion")
            if not isinstance(assertion, str):
                raise oauth.GrantError("invalid_request", "Missing required parameter: assertion")
            oauth.decode_assertion(assertion, now)
        except oauth.GrantError as e:
            self.stats.request("token", 400)
            return web.Response(body=e.body(), status=400, headers={"Content-Type": _JSON})
        tok, ttl = oauth.issue(self.token_key, now, self.config.access_token_ttl_s)
        self.stats.tokens_issued += 1
        body = orjson.dumps({"access_token": tok, "expires_in": ttl, "token_type": "Bearer"})
        return self._ok("token", body)

    async def stats_view(self, _request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.snapshot()), headers={"Content-Type": _JSON})

    async def billing_export(self, _request: web.Request) -> web.Response:
        """What the Cloud Billing export would hold for what was served (JSON lines)."""
        return web.Response(body=self.billing.export(), headers={"Content-Type": _JSONL})

    async def reset_view(self, _request: web.Request) -> web.Response:
        self.reset()  # the bill is kept: Google forgets nothing it served
        return web.Response(body=b"{}", headers={"Content-Type": _JSON})


EMULATOR: web.AppKey[Emulator] = web.AppKey("emulator", Emulator)


def build_app(
    config: EmulatorConfig | None = None, *, clock: Clock = SYSTEM_CLOCK
) -> web.Application:
    """The emulator as an aiohttp application (state in ``app[EMULATOR]``), on ``clock``."""
    emu = Emulator(config or EmulatorConfig(), clock)
    middlewares = [_echo_request] if emu.config.echo_request_in_errors else []
    app = web.Application(client_max_size=32 * 1024 * 1024, middlewares=middlewares)  # bytes
    app[EMULATOR] = emu
    r = app.router
    for version in ("v1beta", "v1"):
        r.add_post(f"/{version}/models/{{tail}}", emu.developer)
        r.add_post(f"/{version}/interactions", emu.interaction)
    vertex_versions = "{version:v1|v1beta1}"
    r.add_post(
        f"/{vertex_versions}/projects/{{project}}/locations/{{location}}"
        "/publishers/{publisher}/models/{tail}",
        emu.vertex,
    )
    r.add_post(f"/{vertex_versions}/publishers/{{publisher}}/models/{{tail}}", emu.vertex)
    batch = emu.batch
    for version in ("v1beta", "v1"):  # google-genai sends v1 when given a base_url
        r.add_post(f"/upload/{version}/files", emu._batch_route(batch.upload))
        r.add_get(f"/{version}/batches", emu._batch_route(batch.list))
        r.add_get(f"/{version}/batches/{{tail}}", emu._batch_route(batch.get))
        r.add_post(f"/{version}/batches/{{tail}}", emu._batch_route(batch.cancel))
        r.add_delete(f"/{version}/batches/{{tail}}", emu._batch_route(batch.delete))
        for prefix in (f"/download/{version}", f"/{version}"):
            r.add_get(f"{prefix}/files/{{tail}}", emu._batch_route(batch.file_get))
    jobs = f"/{vertex_versions}/projects/{{project}}/locations/{{location}}/batchPredictionJobs"
    prediction = emu.prediction
    r.add_post(jobs, emu._prediction_route(prediction.create))
    r.add_get(jobs, emu._prediction_route(prediction.list))
    r.add_get(jobs + "/{tail}", emu._prediction_route(prediction.get))
    r.add_post(jobs + "/{tail}", emu._prediction_route(prediction.cancel))
    r.add_delete(jobs + "/{tail}", emu._prediction_route(prediction.delete))
    storage = emu.storage
    r.add_post("/upload/storage/v1/b/{bucket}/o", emu._storage_route(storage.upload_start))
    r.add_put("/upload/storage/v1/b/{bucket}/o", emu._storage_route(storage.upload_chunk))
    r.add_get("/storage/v1/b/{bucket}/o", emu._storage_route(storage.list))
    for prefix in ("/storage/v1", "/download/storage/v1"):
        r.add_get(prefix + "/b/{bucket}/o/{name:.+}", emu._storage_route(storage.object_get))
    r.add_delete("/storage/v1/b/{bucket}/o/{name:.+}", emu._storage_route(storage.delete))
    r.add_get(redirects.PATH_PREFIX + "{token}", emu.redirect)
    r.add_post("/token", emu.token)
    r.add_get("/emulator/stats", emu.stats_view)
    r.add_post("/emulator/reset", emu.reset_view)
    r.add_get("/emulator/billing-export", emu.billing_export)
    return app


@web.middleware
async def _echo_request(request: web.Request, handler: Any) -> web.StreamResponse:
    """``echo_request_in_errors``: a JSON error body repeats the request (its key and token)."""
    response = await handler(request)
    if (
        response.status >= 400
        and isinstance(response, web.Response)
        and isinstance(response.body, bytes)
        and response.content_type == "application/json"
    ):
        response.body = error_bodies.echo_request(
            response.body,
            request.method,
            str(request.url),
            request.headers.get("x-goog-api-key", ""),
            request.headers.get("Authorization", ""),
        )
    return response


def snapshot(app: web.Application) -> dict[str, Any]:
    """The stats of ``app`` (call on the app's own event loop)."""
    return app[EMULATOR].snapshot()


def _refuse_unsupported(req: GenerateRequest, traits: models.ModelTraits) -> None:
    """The 400s the API sends for a tool or output its model generation does not take."""
    if "googleSearchRetrieval" in req.tools and traits.major >= 2:
        msg = (
            error_bodies.SEARCH_RETRIEVAL_ON_2
            if traits.major == 2
            else error_bodies.SEARCH_RETRIEVAL_ON_3
        )
        raise error_bodies.invalid_argument(msg, kind="search_retrieval_unsupported")
    if req.json_output and traits.major <= 2 and SEARCH_TOOLS.intersection(req.tools):
        raise error_bodies.invalid_argument(
            error_bodies.SCHEMA_WITH_SEARCH, kind="schema_with_search"
        )


def _framed(payload: bytes, method: str, request: web.Request) -> tuple[bytes, str]:
    """The body and its content type: unary JSON, or one stream event carrying the answer."""
    if method != "streamGenerateContent":
        return payload, _JSON
    if request.query.get("alt") == "sse":
        return b"data: " + payload + b"\r\n\r\n", "text/event-stream"
    return b"[" + payload + b"]", _JSON


def _links_base(request: web.Request, userinfo: str) -> str:
    """``scheme://host`` of this request, where answers' links point (with ``userinfo@``)."""
    return f"{request.scheme}://{userinfo + '@' if userinfo else ''}{request.host}"
