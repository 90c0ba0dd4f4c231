// ref_logits: llama.cpp's next-token log-probabilities for given token ids, from the reference
// build's libllama (../shared/tools/llama-cpp-reference.sh). kiln's tests compare against what
// this prints (scripts/reference/regen_arch_proofs.py, regen_gemma_golden.py); CI never runs it.
//
//   ref_logits --model M.gguf --tokens 1,2,3 [--threads 2] [--chunk 16] [--top 8] [--ctx 256]
//              [--generate N] [--stop ID,...] [--dump 1] [--kv-type f16|q8_0]
//
// --dump 1 prints every F32 tensor the graph computes (name, sum, first values) on stderr and,
// with REF_DUMP_DIR set, writes each as raw f32 to REF_DUMP_DIR/NAME.f32 (to compare with
// examples/trace_fox.rs, which writes kiln's activations to KILN_DUMP_DIR).
//
// Teacher forcing: the ids are fed in chunks of --chunk tokens (below llama.cpp's 64-token tiled
// flash-attention path, so every position takes the same one-query path kiln follows), with
// logits at every position. Then, with --generate N, up to N tokens are chosen greedily (argmax
// of the raw logits) and fed back one at a time, stopping after an id of --stop. Flash attention
// on, f16 K/V cache (--kv-type q8_0: Q8_0 K and V, llama.cpp's -ctk/-ctv q8_0), one sequence. The context is --ctx cells (llama.cpp pads it to 256); keep
// fed + generated positions below 512 so decode never takes the split-KV path.
//
// Prints JSON: {"n_vocab", "threads", "chunk", "ctx", "steps": [{"pos", "input", "top": [[id,
// logprob], ...]}], "generated": [id, ...]} where step i holds log_softmax(logits) after the
// token at position i (the distribution of position i + 1), top --top ids by logprob (ties by
// id), logprobs in double precision from the f32 logits.
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet_log(enum ggml_log_level level, const char * text, void * user) {
    (void) user;
    if (level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

// --dump: every F32 tensor the graph computes, as "name sum first-values" on stderr (to
// compare with kiln's `--features trace` hook layer by layer).
static bool dump_cb(struct ggml_tensor * t, bool ask, void * user) {
    (void) user;
    if (ask) {
        return true;
    }
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
        return true;
    }
    const float * x = (const float *) t->data;
    int64_t n = ggml_nelements(t);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += x[i];
    }
    fprintf(stderr, "dump %s [%lld,%lld] sum=%.6f |", t->name, (long long) t->ne[0],
            (long long) t->ne[1], sum);
    for (int64_t i = 0; i < n && i < 4; i++) {
        fprintf(stderr, " %.5f", x[i]);
    }
    fprintf(stderr, "\n");
    const char * dir = getenv("REF_DUMP_DIR");
    if (dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.f32", dir, t->name);
        FILE * f = fopen(path, "wb");
        if (f) {
            fwrite(x, sizeof(float), (size_t) n, f);
            fclose(f);
        }
    }
    return true;
}

static int parse_ids(const char * s, int ** out) {
    int cap = 64, n = 0;
    int * ids = malloc(sizeof(int) * cap);
    while (*s) {
        char * end;
        long v = strtol(s, &end, 10);
        if (end == s) {
            fprintf(stderr, "ref_logits: bad id list near '%s'\n", s);
            exit(2);
        }
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, sizeof(int) * cap);
        }
        ids[n++] = (int) v;
        s = end;
        while (*s == ',' || *s == ' ' || *s == '\n') {
            s++;
        }
    }
    *out = ids;
    return n;
}

static char * read_file(const char * path) {
    FILE * f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "ref_logits: cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char * buf = malloc(n + 1);
    if (fread(buf, 1, n, f) != (size_t) n) {
        fprintf(stderr, "ref_logits: cannot read %s\n", path);
        exit(2);
    }
    buf[n] = 0;
    fclose(f);
    return buf;
}

// The top `k` (id, logprob) of one logits row, into ids/lps; returns the argmax.
static int top_k(const float * logits, int n_vocab, int k, int * ids, double * lps) {
    double max = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        if (logits[i] > max) {
            max = logits[i];
        }
    }
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) {
        sum += exp((double) logits[i] - max);
    }
    double lse = max + log(sum);
    for (int j = 0; j < k; j++) {
        ids[j] = -1;
    }
    for (int i = 0; i < n_vocab; i++) {
        double lp = (double) logits[i] - lse;
        int j = k;
        while (j > 0 && (ids[j - 1] < 0 || lp > lps[j - 1])) {
            j--;
        }
        if (j == k) {
            continue;
        }
        for (int m = k - 1; m > j; m--) {
            ids[m] = ids[m - 1];
            lps[m] = lps[m - 1];
        }
        ids[j] = i;
        lps[j] = lp;
    }
    return ids[0];
}

static void print_step(int pos, int input, const int * ids, const double * lps, int k, int first) {
    printf("%s\n  {\"pos\": %d, \"input\": %d, \"top\": [", first ? "" : ",", pos, input);
    for (int j = 0; j < k; j++) {
        printf("%s[%d, %.6f]", j ? ", " : "", ids[j], lps[j]);
    }
    printf("]}");
}

int main(int argc, char ** argv) {
    const char * model_path = NULL;
    const char * tokens_arg = NULL;
    int threads = 2, chunk = 16, top = 8, ctx = 256, generate = 0;
    int * stop = NULL;
    int n_stop = 0;
    int dump = 0;
    int kv_q8 = 0;
    for (int i = 1; i < argc; i++) {
        const char * a = argv[i];
        const char * v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "ref_logits: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--tokens")) tokens_arg = v;
        else if (!strcmp(a, "--tokens-file")) tokens_arg = read_file(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--chunk")) chunk = atoi(v);
        else if (!strcmp(a, "--top")) top = atoi(v);
        else if (!strcmp(a, "--ctx")) ctx = atoi(v);
        else if (!strcmp(a, "--generate")) generate = atoi(v);
        else if (!strcmp(a, "--stop")) n_stop = parse_ids(v, &stop);
        else if (!strcmp(a, "--dump")) dump = atoi(v);
        else if (!strcmp(a, "--kv-type")) {
            if (!strcmp(v, "q8_0")) kv_q8 = 1;
            else if (strcmp(v, "f16")) {
                fprintf(stderr, "ref_logits: --kv-type is f16 or q8_0\n");
                return 2;
            }
        }
        else {
            fprintf(stderr, "ref_logits: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (!model_path || !tokens_arg || chunk < 1 || chunk >= 64 || top < 1 || threads < 1) {
        fprintf(stderr, "usage: ref_logits --model M --tokens IDS|--tokens-file F [--threads N] "
                        "[--chunk 1..63] [--top K] [--ctx N] [--generate N] [--stop IDS] "
                        "[--kv-type f16|q8_0]\n");
        return 2;
    }
    int * tokens;
    int n_tokens = parse_ids(tokens_arg, &tokens);

    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "ref_logits: cannot load %s\n", model_path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = ctx;
    cp.n_batch = chunk;
    cp.n_ubatch = chunk;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.no_perf = true;
    if (kv_q8) {
        cp.type_k = GGML_TYPE_Q8_0;
        cp.type_v = GGML_TYPE_Q8_0;
    }
    if (dump) {
        cp.cb_eval = dump_cb;
        cp.cb_eval_user_data = NULL;
    }
    struct llama_context * lctx = llama_init_from_model(model, cp);
    if (!lctx) {
        fprintf(stderr, "ref_logits: cannot create a context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    int * ids = malloc(sizeof(int) * top);
    double * lps = malloc(sizeof(double) * top);
    struct llama_batch batch = llama_batch_init(chunk, 0, 1);

    printf("{\"n_vocab\": %d, \"threads\": %d, \"chunk\": %d, \"ctx\": %d, \"steps\": [", n_vocab,
           threads, chunk, ctx);
    int first = 1, last = -1;
    for (int p0 = 0; p0 < n_tokens; p0 += chunk) {
        int n = n_tokens - p0 < chunk ? n_tokens - p0 : chunk;
        batch.n_tokens = n;
        for (int i = 0; i < n; i++) {
            batch.token[i] = tokens[p0 + i];
            batch.pos[i] = p0 + i;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = 0;
            batch.logits[i] = 1;
        }
        if (llama_decode(lctx, batch) != 0) {
            fprintf(stderr, "ref_logits: llama_decode failed at position %d\n", p0);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            last = top_k(llama_get_logits_ith(lctx, i), n_vocab, top, ids, lps);
            print_step(p0 + i, tokens[p0 + i], ids, lps, top, first);
            first = 0;
        }
    }
    printf("\n], \"generated\": [");
    int pos = n_tokens;
    for (int g = 0; g < generate; g++) {
        printf("%s%d", g ? ", " : "", last);
        int is_stop = 0;
        for (int s = 0; s < n_stop; s++) {
            is_stop |= stop[s] == last;
        }
        if (is_stop || g + 1 == generate) {
            break;
        }
        batch.n_tokens = 1;
        batch.token[0] = last;
        batch.pos[0] = pos;
        batch.n_seq_id[0] = 1;
        batch.seq_id[0][0] = 0;
        batch.logits[0] = 1;
        if (llama_decode(lctx, batch) != 0) {
            fprintf(stderr, "ref_logits: llama_decode failed at position %d\n", pos);
            return 1;
        }
        last = top_k(llama_get_logits_ith(lctx, 0), n_vocab, top, ids, lps);
        pos++;
    }
    printf("]}\n");
    llama_batch_free(batch);
    llama_free(lctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
