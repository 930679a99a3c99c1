/* The coordinator's state as JSON (docs/interfaces.md). Called with D.mu held. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "extent_read.h"
#include "peer_module.h"

struct out {
	char *p;
	size_t cap, len;
};

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (o->len < o->cap) {
		int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
		if (n > 0)
			o->len = (size_t)n < o->cap - o->len ? o->len + (size_t)n : o->cap - 1;
	}
	va_end(ap);
}

static int job_sessions(int job)
{
	int n = 0;
	for (struct session *s = D.sessions; s; s = s->hh.next)
		n += s->job == job;
	return n;
}

static void job_obj(struct out *o, int j)
{
	struct dlshim_job_stats st;
	dlshim_engine_job_stats(D.eng, j, &st);
	/* Job names are restricted to a JSON-safe alphabet by the config parser. */
	put(o,
	    "{\"job\":\"%s\",\"live\":%s,\"sampler\":\"%s\",\"sessions\":%d,\"requests\":%llu,\"hits\":%llu,\"misses\":%llu,"
	    "\"waits\":%llu,\"passthrough\":%llu,\"bytes_from_cache\":%llu,\"bytes_from_disk\":%llu,"
	    "\"bytes_passthrough\":%llu,\"epochs\":%llu,\"files_loaded\":%llu,\"evictions\":%llu,"
	    "\"redirects\":%llu,\"chunk_loads\":%llu,\"loads_ahead\":%llu,\"bytes_consumed\":%llu,\"row_index_hits\":%llu,\"redecided\":%llu,\"io_efficiency\":%.4f",
	    dlshim_engine_job_name(D.eng, j), dlshim_engine_job_live(D.eng, j) ? "true" : "false",
	    dlshim_sampler_name(dlshim_engine_job_sampler(D.eng, j)), job_sessions(j),
	    (unsigned long long)st.requests, (unsigned long long)st.hits, (unsigned long long)st.misses,
	    (unsigned long long)st.waits, (unsigned long long)st.passthrough,
	    (unsigned long long)st.bytes_from_cache, (unsigned long long)st.bytes_from_disk,
	    (unsigned long long)st.bytes_passthrough, (unsigned long long)st.epochs,
	    (unsigned long long)st.files_loaded, (unsigned long long)st.evictions,
	    (unsigned long long)st.redirects, (unsigned long long)st.chunk_loads,
	    (unsigned long long)st.loads_ahead,
	    (unsigned long long)st.bytes_consumed, (unsigned long long)st.row_index_hits,
	    (unsigned long long)st.redecided,
	    st.bytes_from_disk ? (double)st.bytes_consumed / (double)st.bytes_from_disk : 0.0);
	/* A job whose ranks run on several nodes: its decisions that another
	 * node's claim had already taken (decided again here). */
	put(o, ",\"spans_nodes\":%s,\"claims_refused\":%llu", D.job_spans[j] ? "true" : "false",
	    (unsigned long long)D.claims_refused[j]);
	/* Per epoch: what the cache and redirection did (the last 64). */
	put(o, ",\"per_epoch\":[");
	uint32_t cur = dlshim_engine_job_epoch_current(D.eng, j);
	struct dlshim_epoch_stats es;
	for (uint32_t n = cur >= 63 ? cur - 63 : 0; n <= cur; n++) {
		if (dlshim_engine_job_epoch_stats(D.eng, j, n, &es) < 0)
			continue;
		put(o, "%s{\"epoch\":%u,\"complete\":%s,\"requests\":%llu,\"redirects\":%llu,\"chunk_loads\":%llu,"
		       "\"bytes_from_disk\":%llu,\"bytes_consumed\":%llu,\"waste_bytes\":%llu,\"io_efficiency\":%.4f",
		    n == (cur >= 63 ? cur - 63 : 0) ? "" : ",", es.epoch, es.complete ? "true" : "false",
		    (unsigned long long)es.requests, (unsigned long long)es.redirects, (unsigned long long)es.chunk_loads,
		    (unsigned long long)es.bytes_from_disk, (unsigned long long)es.bytes_consumed,
		    (unsigned long long)es.waste_bytes,
		    es.bytes_from_disk ? (double)es.bytes_consumed / (double)es.bytes_from_disk : 0.0);
		const struct dlshim_order_stats *r = &es.order;
		if (r->n) {
			put(o, ",\"order\":{\"files\":%u,\"displacement\":%.4f,\"locality\":%.4f,"
			       "\"locality_shuffle\":%.4f,\"class_mix\":%.4f",
			    r->n, r->displacement, r->locality, r->locality_shuffle, r->class_mix);
			if (r->has_prev)
				put(o, ",\"pair_repeat\":%.4f,\"pair_repeat_shuffle\":%.4f", r->pair_repeat,
				    r->pair_repeat_shuffle);
			put(o, "}");
		}
		put(o, "}");
	}
	put(o, "]}");
}

size_t stats_json(char *buf, size_t cap, int job)
{
	struct out o = {buf, cap, 0};
	buf[0] = 0;
	if (job >= 0) {
		job_obj(&o, job);
		put(&o, "\n");
		return o.len;
	}
	struct dlshim_cache_stats cs;
	dlshim_engine_cache_stats(D.eng, &cs);
	put(&o, "{\"daemon\":{\"pid\":%d,\"uptime_s\":%ld,\"sessions\":%u,\"clients\":%d,\"segment_id\":\"%016llx\","
		"\"runtime_dir\":\"%s\",\"evict\":\"%s\"},\n",
	    (int)getpid(), (long)(time(NULL) - D.started), HASH_COUNT(D.sessions), D.nclients,
	    (unsigned long long)D.segment_id, D.cfg.runtime_dir, dlshim_evict_name(D.cfg.evict));
	put(&o,
	    " \"cache\":{\"capacity_bytes\":%llu,\"used_bytes\":%llu,\"items_resident\":%llu,\"items_pinned\":%llu,"
	    "\"items_known\":%llu,\"loads\":%llu,\"evictions\":%llu,\"stale_reloads\":%llu,\"alloc_failures\":%llu,"
	    "\"spare_refused\":%llu,\"waste_bytes\":%llu,\"chunk_files\":%u},\n",
	    (unsigned long long)cs.capacity_bytes, (unsigned long long)cs.used_bytes,
	    (unsigned long long)cs.items_resident, (unsigned long long)cs.items_pinned,
	    (unsigned long long)cs.items_known, (unsigned long long)cs.loads, (unsigned long long)cs.evictions,
	    (unsigned long long)cs.stale_reloads, (unsigned long long)cs.alloc_failures,
	    (unsigned long long)cs.spare_refused, (unsigned long long)cs.waste_bytes, cs.chunk_files);
	struct extent_read_stats xs;
	loader_extent_stats(&xs);
	put(&o, " \"loader\":{\"extent_reads\":\"%s\",\"extent_files\":%llu,\"extent_file_bytes\":%llu,"
		"\"extent_runs\":%llu,\"extent_device_bytes\":%llu},\n",
	    D.cfg.extent_reads ? "auto" : "off", (unsigned long long)xs.files, (unsigned long long)xs.file_bytes,
	    (unsigned long long)xs.runs, (unsigned long long)xs.device_bytes);
	static char peers[64 * 1024];
	peer_module_json(peers, sizeof(peers));
	put(&o, " \"peers\":%s,\n", peers);
	put(&o, " \"jobs\":[");
	int n = dlshim_engine_njobs(D.eng);
	for (int j = 0; j < n; j++) {
		put(&o, j ? ",\n  " : "\n  ");
		job_obj(&o, j);
	}
	put(&o, "]}\n");
	return o.len;
}
