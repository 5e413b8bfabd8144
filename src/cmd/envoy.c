/*
 * envoy.c — `vsr envoy render` (envoy.h).  The bootstrap is written as YAML
 * with every string JSON-quoted (valid YAML), in the shape of ref §5.4.
 */
#include "envoy.h"

#include <arpa/inet.h>
#include <stdio.h>

#define EXTPROC_CLUSTER "vsr_extproc"
#define GRPC_TIMEOUT_S 1200

/* the headers Envoy lets an ext_proc answer set among x-envoy-* (the five-header rule) */
static const char FIVE_HEADERS_RE[] =
    "x-envoy-(upstream-rq-timeout-ms|upstream-rq-per-try-timeout-ms|max-retries|retry-on|retriable-status-codes)";

/* the internal headers a client must never send through the edge (ref §5.4) */
static const char *const EDGE_REMOVED[] = {"x-vsr-looper-request", "x-vsr-looper-secret", "x-vsr-looper-decision",
                                           "x-vsr-looper-iteration", "x-authz-user-id", "x-authz-user-groups"};

static void q(vsr_buf_t *b, const char *s)
{
    vsr_buf_append_json_string(b, vsr_slice_cstr(s ? s : ""));
}

static void dur(vsr_buf_t *b, uint64_t ms)
{
    if (ms % 1000 == 0)
        vsr_buf_printf(b, "\"%llus\"", (unsigned long long)(ms / 1000));
    else
        vsr_buf_printf(b, "\"%llu.%03llus\"", (unsigned long long)(ms / 1000), (unsigned long long)(ms % 1000));
}

/* a model's cluster name (unquoted): '/' and '-' become '_' */
static void cluster_raw(vsr_buf_t *b, const char *model)
{
    for (const char *p = model; *p; p++)
        vsr_buf_append(b, (*p == '/' || *p == '-') ? "_" : p, 1);
    vsr_buf_append_cstr(b, "_cluster");
}

static void cluster_name(vsr_buf_t *b, const char *model)
{
    vsr_buf_t n;
    vsr_buf_init(&n, 0);
    cluster_raw(&n, model);
    vsr_buf_append(&n, "", 1);
    q(b, n.data);
    vsr_buf_free(&n);
}

static int is_ip(const char *h)
{
    unsigned char a[16];
    return inet_pton(AF_INET, h, a) == 1 || inet_pton(AF_INET6, h, a) == 1;
}

static void render_route(vsr_buf_t *b, const vsr_model_conf_t *m, const vsr_listener_conf_t *lc, int match_header)
{
    const vsr_reliability_conf_t *r = m->has_reliability ? &m->reliability : NULL;
    vsr_buf_append_cstr(b, "                        - match:\n                            prefix: \"/\"\n");
    if (match_header) {
        vsr_buf_append_cstr(b, "                            headers:\n"
                               "                              - name: \"x-selected-model\"\n"
                               "                                string_match:\n"
                               "                                  exact: ");
        q(b, m->name);
        vsr_buf_append_cstr(b, "\n");
    }
    vsr_buf_append_cstr(b, "                          route:\n                            cluster: ");
    cluster_name(b, m->name);
    vsr_buf_append_cstr(b, "\n                            timeout: ");
    dur(b, r && r->has_total_timeout ? r->total_timeout_ms : lc->timeout_ms);
    vsr_buf_append_cstr(b, "\n                            idle_timeout: \"1200s\"\n");
    if (m->n_backends) {
        const vsr_backend_conf_t *be = &m->backends[0];
        vsr_buf_append_cstr(b, "                            host_rewrite_literal: ");
        q(b, be->authority);
        vsr_buf_append_cstr(b, "\n");
        if (be->has_base_url && be->path_prefix) {
            /* /v1/... becomes the base_url's path (ref §1.3) */
            vsr_buf_append_cstr(b, "                            regex_rewrite:\n"
                                   "                              pattern:\n"
                                   "                                regex: \"^/v1([/?].*)?$\"\n"
                                   "                              substitution: ");
            vsr_buf_t sub;
            vsr_buf_init(&sub, 0);
            vsr_buf_printf(&sub, "%s\\1", be->path_prefix);
            vsr_buf_append(&sub, "", 1);
            q(b, sub.data);
            vsr_buf_free(&sub);
            vsr_buf_append_cstr(b, "\n");
        }
    }
    if (r && r->has_retry_count && r->retry_count > 0) {
        vsr_buf_append_cstr(b, "                            retry_policy:\n                              retry_on: ");
        q(b, r->retry_on && r->retry_on[0] ? r->retry_on : "connect-failure,refused-stream");
        vsr_buf_printf(b, "\n                              num_retries: %u\n", r->retry_count);
        if (r->has_per_try_timeout) {
            vsr_buf_append_cstr(b, "                              per_try_timeout: ");
            dur(b, r->per_try_timeout_ms);
            vsr_buf_append_cstr(b, "\n");
        }
        if (r->n_retriable_status_codes) {
            vsr_buf_append_cstr(b, "                              retriable_status_codes: [");
            for (size_t i = 0; i < r->n_retriable_status_codes; i++)
                vsr_buf_printf(b, "%s%u", i ? ", " : "", r->retriable_status_codes[i]);
            vsr_buf_append_cstr(b, "]\n");
        }
        vsr_buf_append_cstr(b, "                              retry_host_predicate:\n"
                               "                                - name: \"envoy.retry_host_predicates.previous_hosts\"\n"
                               "                                  typed_config:\n"
                               "                                    \"@type\": \"type.googleapis.com/envoy.extensions."
                               "retry.host.previous_hosts.v3.PreviousHostsPredicate\"\n"
                               "                              host_selection_retry_max_attempts: 3\n");
    }
}

static void render_listener(vsr_buf_t *b, const vsr_config_t *cfg, const vsr_listener_conf_t *lc)
{
    vsr_buf_append_cstr(b, "    - name: ");
    q(b, lc->name);
    vsr_buf_append_cstr(b, "\n      address:\n        socket_address:\n          address: ");
    q(b, lc->address ? lc->address : "0.0.0.0");
    vsr_buf_printf(b, "\n          port_value: %u\n", (unsigned)lc->port);
    vsr_buf_append_cstr(b, "      per_connection_buffer_limit_bytes: 524288000\n"
                           "      filter_chains:\n"
                           "        - filters:\n"
                           "            - name: \"envoy.filters.network.http_connection_manager\"\n"
                           "              typed_config:\n"
                           "                \"@type\": \"type.googleapis.com/envoy.extensions.filters.network."
                           "http_connection_manager.v3.HttpConnectionManager\"\n"
                           "                stat_prefix: ");
    q(b, lc->name);
    vsr_buf_append_cstr(b, "\n                stream_idle_timeout: ");
    dur(b, lc->timeout_ms);
    vsr_buf_append_cstr(b, "\n                access_log:\n"
                           "                  - name: \"envoy.access_loggers.stdout\"\n"
                           "                    typed_config:\n"
                           "                      \"@type\": \"type.googleapis.com/envoy.extensions.access_loggers."
                           "stream.v3.StdoutAccessLog\"\n"
                           "                route_config:\n"
                           "                  name: \"vsr_routes\"\n"
                           "                  request_headers_to_remove:\n");
    for (size_t i = 0; i < VSR_ARRAY_LEN(EDGE_REMOVED); i++) {
        vsr_buf_append_cstr(b, "                    - ");
        q(b, EDGE_REMOVED[i]);
        vsr_buf_append_cstr(b, "\n");
    }
    vsr_buf_append_cstr(b, "                  virtual_hosts:\n"
                           "                    - name: \"vsr\"\n"
                           "                      domains: [\"*\"]\n"
                           "                      routes:\n");
    for (size_t i = 0; i < cfg->n_models; i++)
        if (cfg->models[i].n_backends) /* a model without backend_refs has no cluster */
            render_route(b, &cfg->models[i], lc, 1);
    const vsr_model_conf_t *dflt = vsr_config_default_model(cfg);
    for (size_t i = 0; (dflt == NULL || dflt->n_backends == 0) && i < cfg->n_models; i++)
        dflt = &cfg->models[i];
    if (dflt && dflt->n_backends)
        render_route(b, dflt, lc, 0); /* Envoy's default route: paths vsr does not route */
    vsr_buf_append_cstr(b, "                http_filters:\n"
                           "                  - name: \"envoy.filters.http.ext_proc\"\n"
                           "                    typed_config:\n"
                           "                      \"@type\": \"type.googleapis.com/envoy.extensions.filters.http."
                           "ext_proc.v3.ExternalProcessor\"\n"
                           "                      grpc_service:\n"
                           "                        envoy_grpc:\n"
                           "                          cluster_name: \"" EXTPROC_CLUSTER "\"\n");
    vsr_buf_printf(b, "                        timeout: \"%us\"\n", GRPC_TIMEOUT_S);
    vsr_buf_append_cstr(b, "                      processing_mode:\n"
                           "                        request_header_mode: \"SEND\"\n"
                           "                        response_header_mode: \"SEND\"\n"
                           "                        request_body_mode: \"BUFFERED\"\n"
                           "                        response_body_mode: \"NONE\"\n"
                           "                      allow_mode_override: true\n"
                           "                      message_timeout: ");
    dur(b, lc->timeout_ms);
    vsr_buf_append_cstr(b, "\n                      mutation_rules:\n"
                           "                        allow_expression:\n"
                           "                          regex: ");
    q(b, FIVE_HEADERS_RE);
    vsr_buf_append_cstr(b, "\n                  - name: \"envoy.filters.http.router\"\n"
                           "                    typed_config:\n"
                           "                      \"@type\": \"type.googleapis.com/envoy.extensions.filters.http."
                           "router.v3.Router\"\n");
}

static void render_endpoints(vsr_buf_t *b, const char *name, const vsr_backend_conf_t *be, size_t n)
{
    vsr_buf_append_cstr(b, "      load_assignment:\n        cluster_name: ");
    q(b, name);
    vsr_buf_append_cstr(b, "\n        endpoints:\n          - lb_endpoints:\n");
    for (size_t i = 0; i < n; i++) {
        vsr_buf_append_cstr(b, "              - endpoint:\n                  address:\n"
                               "                    socket_address:\n                      address: ");
        q(b, be[i].host);
        vsr_buf_printf(b, "\n                      port_value: %u\n", (unsigned)be[i].port);
        vsr_buf_printf(b, "                load_balancing_weight: %u\n", be[i].weight ? be[i].weight : 1);
    }
}

static void render_cluster(vsr_buf_t *b, const vsr_model_conf_t *m)
{
    const vsr_reliability_conf_t *r = m->has_reliability ? &m->reliability : NULL;
    vsr_buf_t cn;
    vsr_buf_init(&cn, 0);
    cluster_raw(&cn, m->name);
    vsr_buf_append(&cn, "", 1);
    int names = 0, tls = 0, h2 = 0;
    for (size_t i = 0; i < m->n_backends; i++) {
        names += !is_ip(m->backends[i].host);
        tls |= m->backends[i].tls;
        h2 |= m->backends[i].h2;
    }
    vsr_buf_append_cstr(b, "    - name: ");
    q(b, cn.data);
    vsr_buf_printf(b, "\n      type: %s\n", names == 0 ? "STATIC" : m->n_backends == 1 ? "LOGICAL_DNS" : "STRICT_DNS");
    if (names)
        vsr_buf_append_cstr(b, "      dns_lookup_family: V4_ONLY\n");
    vsr_buf_append_cstr(b, "      connect_timeout: ");
    dur(b, r && r->has_connect_timeout ? r->connect_timeout_ms : 10000);
    vsr_buf_append_cstr(b, "\n");
    if (r && r->lb_policy && strcmp(r->lb_policy, "least_request") == 0)
        vsr_buf_append_cstr(b, "      lb_policy: LEAST_REQUEST\n      least_request_lb_config:\n        choice_count: 2\n");
    else
        vsr_buf_append_cstr(b, "      lb_policy: ROUND_ROBIN\n");
    int enhanced = r && ((r->has_retry_count && r->retry_count) || r->has_consecutive_5xx);
    if (enhanced || (r && (r->has_max_connections || r->has_max_pending_requests || r->has_max_requests)))
        vsr_buf_printf(b, "      circuit_breakers:\n        thresholds:\n"
                          "          - max_connections: %u\n            max_pending_requests: %u\n"
                          "            max_requests: %u\n",
                       r->has_max_connections ? r->max_connections : 1024,
                       r->has_max_pending_requests ? r->max_pending_requests : 1024,
                       r->has_max_requests ? r->max_requests : enhanced ? 4096 : 1024);
    if (r && r->has_consecutive_5xx) {
        vsr_buf_printf(b, "      outlier_detection:\n        interval: \"10s\"\n        consecutive_5xx: %u\n",
                       r->consecutive_5xx);
        vsr_buf_append_cstr(b, "        base_ejection_time: ");
        dur(b, r->has_base_ejection_time ? r->base_ejection_time_ms : 30000);
        vsr_buf_printf(b, "\n        max_ejection_percent: %u\n", r->has_max_ejection_percent ? r->max_ejection_percent : 50);
    }
    if (r && r->health_check_path) {
        vsr_buf_append_cstr(b, "      health_checks:\n        - timeout: ");
        dur(b, r->has_health_check_timeout ? r->health_check_timeout_ms : 2000);
        vsr_buf_append_cstr(b, "\n          interval: ");
        dur(b, r->has_health_check_interval ? r->health_check_interval_ms : 10000);
        vsr_buf_append_cstr(b, "\n          unhealthy_threshold: 3\n          healthy_threshold: 1\n"
                               "          http_health_check:\n            path: ");
        q(b, r->health_check_path);
        vsr_buf_append_cstr(b, "\n");
    }
    if (h2)
        vsr_buf_append_cstr(b, "      typed_extension_protocol_options:\n"
                               "        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n"
                               "          \"@type\": \"type.googleapis.com/envoy.extensions.upstreams.http.v3."
                               "HttpProtocolOptions\"\n"
                               "          explicit_http_config:\n            http2_protocol_options: {}\n");
    if (tls) {
        vsr_buf_append_cstr(b, "      transport_socket:\n        name: \"envoy.transport_sockets.tls\"\n"
                               "        typed_config:\n"
                               "          \"@type\": \"type.googleapis.com/envoy.extensions.transport_sockets.tls."
                               "v3.UpstreamTlsContext\"\n          sni: ");
        q(b, m->backends[0].host);
        vsr_buf_append_cstr(b, "\n          common_tls_context:\n            tls_params:\n"
                               "              tls_minimum_protocol_version: TLSv1_2\n"
                               "              tls_maximum_protocol_version: TLSv1_3\n");
    }
    render_endpoints(b, cn.data, m->backends, m->n_backends);
    vsr_buf_free(&cn);
}

int vsr_envoy_render(const vsr_config_t *cfg, const vsr_envoy_render_opts_t *o, vsr_buf_t *out, vsr_buf_t *err)
{
    if (vsr_config_check_extproc(cfg, err) > 0)
        return VSR_ERR_INVALID;
    vsr_buf_append_cstr(out, "# Envoy bootstrap for vsr in extproc mode (vsr envoy render); see docs/extproc.md\n");
    vsr_buf_printf(out, "admin:\n  address:\n    socket_address:\n      address: \"0.0.0.0\"\n      port_value: %u\n",
                   (unsigned)(o->admin_port ? o->admin_port : 9901));
    vsr_buf_append_cstr(out, "layered_runtime:\n  layers:\n    - name: \"static\"\n      static_layer:\n"
                             "        overload:\n          global_downstream_max_connections: 50000\n");
    vsr_buf_append_cstr(out, "static_resources:\n  listeners:\n");
    for (size_t i = 0; i < cfg->n_listeners; i++)
        render_listener(out, cfg, &cfg->listeners[i]);
    vsr_buf_append_cstr(out, "  clusters:\n    - name: \"" EXTPROC_CLUSTER "\"\n      type: STATIC\n"
                             "      connect_timeout: \"1s\"\n"
                             "      typed_extension_protocol_options:\n"
                             "        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n"
                             "          \"@type\": \"type.googleapis.com/envoy.extensions.upstreams.http.v3."
                             "HttpProtocolOptions\"\n"
                             "          explicit_http_config:\n            http2_protocol_options: {}\n");
    vsr_backend_conf_t xp = {.host = (char *)(o->extproc_address ? o->extproc_address : "127.0.0.1"),
                             .port = o->extproc_port ? o->extproc_port : 50051,
                             .weight = 1};
    render_endpoints(out, EXTPROC_CLUSTER, &xp, 1);
    for (size_t i = 0; i < cfg->n_models; i++)
        if (cfg->models[i].n_backends)
            render_cluster(out, &cfg->models[i]);
    return VSR_OK;
}
