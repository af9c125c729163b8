# errors — bad files, bad flags, bad prompts: exit 1, one line "clover: error: ...", no crash; hard but valid input works; every row of README.md's table "Hostile and mistaken input" is a check here
# seconds: 30
# Hard but valid input (invalid UTF-8, -n 0, -c 131072) works; the memory plan and its refusal. The
# check names are the first column of README.md's table "Hostile and mistaken input": keep them.
m=$(model_path q8_0)                              # the base model of most checks
BASE=$m                                           # corrupt's model
tw=$(model_path q8_0 7 --arch clover_moe --mask)  # a model with a mask id
ids=1,2,3,4,5,6,7,8
models() { model q8_0 > /dev/null && model q8_0 7 --arch clover_moe --mask > /dev/null || { fail "cannot generate the models"; return 1; }; }

# clover_error PATTERN ARGS... : clover ARGS must exit 1 with exactly one stderr line that starts
# with "clover: error:" and matches PATTERN (extended regex, case-insensitive).
clover_error() {
    local pat=$1 rc n
    shift
    $TO "$CLOVER" "$@" > /dev/null 2> "$TMP/e.err" < /dev/null
    rc=$?
    n=$(wc -l < "$TMP/e.err")
    if [ "$rc" -ge 124 ]; then
        fail "exit status $rc (crash, signal or timeout): $(first_line "$TMP/e.err")"
    elif [ "$rc" -ne 1 ]; then
        fail "exit status $rc, expected 1: $(first_line "$TMP/e.err")"
    elif [ "$n" -ne 1 ]; then
        fail "$n lines on stderr, expected 1: $(head -n 3 "$TMP/e.err" | tr '\n' '|' | cut -c1-300)"
    elif ! head -n 1 "$TMP/e.err" | grep -q '^clover: error: '; then
        fail "stderr does not start with 'clover: error: ': $(first_line "$TMP/e.err")"
    elif ! grep -Eqi -- "$pat" "$TMP/e.err"; then
        fail "message does not match /$pat/: $(first_line "$TMP/e.err")"
    else
        pass
    fi
}

expect_error() { check "$1" && models && clover_error "${@:2}"; }   # expect_error NAME PATTERN ARGS...
expect_ok() { check "$1" && models && clover_ok "${@:2}"; }         # expect_ok NAME OUT_PATTERN ERR_PATTERN ARGS... (clover_ok: lib.sh)

# corrupt NAME PATTERN EDITS... : a copy of BASE edited by test/gguf_edit.py must fail to load
corrupt() {
    local name=$1 pat=$2 f="$TMP/bad.gguf"
    shift 2
    check "$name" && models || return
    if ! $EDIT edit "$BASE" "$f" "$@" 2> "$TMP/edit.err"; then
        fail "gguf_edit failed: $(tail -n 1 "$TMP/edit.err")"
        return
    fi
    clover_error "$pat" -m "$f" --tokens 1,2,3 --dump-logits "$TMP/bad.bin"
}

# damage NAME MODE N: N damaged copies of the base model, each loaded by clover: exit 0, or exit 1
# with one error line (warnings and the memory plan aside), within 60 s (build/cmp damage; MODE
# random: bytes changed before the data section; truncate: cut at N offsets spread over the file;
# truncate-head: at 0..N-1)
damage() {
    local out f="$TMP/damaged.gguf"
    check "$1" && models || return
    if out=$("$CMP" damage "$m" "$f" "$2" "$3" "$CLOVER" -m "$f" -p 'hello world' --tokenize 2>&1); then
        pass
    else
        fail "$out"
    fi
}

# command line and prompt
expect_error "missing model file" "cannot open|no such" -m "$TMP/nonexistent.gguf" --tokens 1,2
expect_error "no -m" "model" --tokens 1,2
expect_error "unknown flag" "unknown" -m "$m" --tokens 1,2 --bogus-flag
expect_error "missing flag value" "needs|value" -m "$m" --tokens 1,2 -n
expect_error "malformed integer (-n 12x)" "integer" -m "$m" --tokens 1,2 -n 12x
expect_error "integer out of range (-t 0)" "range" -m "$m" --tokens 1,2 -t 0
expect_error "malformed number (--temp abc)" "number|temp" -m "$m" --tokens 1,2 --temp abc
expect_error "--spec-type bogus" "spec-type" -m "$m" --tokens 1,2 --spec-type bogus
expect_error "-ctk q8_0" "ctk|cache|support" -m "$m" --tokens 1,2 -ctk q8_0
expect_error "-ctv q4_0" "ctv|cache|support" -m "$m" --tokens 1,2 -ctv q4_0
expect_error "two prompts" "once|prompt" -m "$m" --tokens 1,2 -p hello
expect_error "empty prompt (-p '')" "empty" -m "$m" -p ""
expect_error "missing prompt file" "prompt file|cannot open" -m "$m" -f "$TMP/nonexistent.txt"
expect_error "prompt longer than -b" "batch|-b" -m "$m" --tokens "$ids" -b 4
expect_error "prompt >= -c" "context|-c" -m "$m" --tokens 1,2,3,4 -c 4
expect_error "-c beyond the model's context" "context" -m "$m" --tokens 1,2 -c 100000
expect_error "token id out of range" "id|token" -m "$m" --tokens 1,2,$N_VOCAB
expect_error "negative token id" "id|token" -m "$m" --tokens 1,-2,3
expect_error "malformed token list" "token|id|expected" -m "$m" --tokens 1,2x,3
expect_error "unwritable --dump-logits" "cannot write|writ" -m "$m" --tokens 1,2 --dump-logits "$TMP/no/such/dir/x.bin"
expect_error "--spec-draft-adaptive with the relaxed rule" "needs the exact rule" -m "$m" -p hi --spec-type draft-self --spec-draft-adaptive --spec-accept-ratio 0.9 --spec-accept-delta 0.6
touch "$TMP/afile"
expect_error "--dump-tensors on a file" "not a folder" -m "$m" --tokens 1,2 --dump-logits "$TMP/x.bin" --dump-tensors "$TMP/afile/sub"
expect_error "value out of range (-ub 0)" "range" -m "$m" --tokens 1,2 -ub 0
expect_error "negative value (-c -5)" "range" -m "$m" --tokens 1,2 -c -5
expect_error "number out of range (--top-p 2)" "top-p" -m "$m" --tokens 1,2 --top-p 2
expect_error "empty --tokens" "empty" -m "$m" --tokens ""
: > "$TMP/empty.txt"
expect_error "empty prompt file" "empty" -m "$m" -f "$TMP/empty.txt"
expect_error "model is a directory" "regular file" -m "$TMP" --tokens 1,2
expect_error "endless prompt file (-f /dev/zero)" "longer than .* bytes" -m "$m" -f /dev/zero
expect_error "prompt file is a directory" "cannot read" -m "$m" -f "$TMP"
: > "$TMP/empty.gguf"
expect_error "empty model file" "too small" -m "$TMP/empty.gguf" --tokens 1,2

# prompts and limits that must work
expect_ok "invalid UTF-8 prompt (-p)" $'^\xef\xbf\xbd\xef\xbf\xbd abc' '' -m "$m" -p $'\xff\xfe abc \xc3' -n 2 --temp 0
expect_ok "invalid UTF-8 prompt file (-f)" $'^ok \xef\xbf\xbd stray' '' -m "$m" -f test/texts/invalid_utf8.txt -n 2 --temp 0
expect_ok "-n 0: the prompt and one token" '^Hello world' '^n_predict = 1$' -m "$m" -p "Hello world" -n 0 --temp 0
expect_ok "memory plan printed before allocating" '' '^clover: memory: weights .* KV cache .* GDN state .* scratch .* available$' -m "$m" --tokens 1,2 -n 1 --temp 0
# hostile weights: every byte of the data section overwritten (build/cmp fill), so that every weight
# (f32) or every block scale (q8_0) is NaN or infinite; the forward pass and the sampler must still run
for spec in "f32 nan 0000c07f" "f32 inf 0000807f" "q8_0 nan ffff"; do
    read -r t name pat <<< "$spec"
    hw="$TMP/hostile-$t-$name.gguf"
    for how in "greedy decoding|--temp 0" "sampling|--temp 0.8 --seed 1"; do
        check "every weight $name ($t file): ${how%%|*}" || continue
        if [ ! -f "$hw" ] && ! { src=$(model "$t") && "$CMP" fill "$src" "$hw" "$pat"; }; then
            fail "cannot write the file"
            continue
        fi
        # shellcheck disable=SC2086
        clover_ok '^Hello' '' -m "$hw" -p "Hello" -n 3 ${how#*|}
    done
done

if check "-c 131072 on a model with context 262144"; then
    if big=$(model q8_0 1 --ctx 262144); then
        clover_ok '' 'KV cache .*-c 131072' -m "$big" --tokens 1,2,3 -n 2 --temp 0 -c 131072
    else
        fail "cannot generate the model"
    fi
fi
for how in "-c beyond free memory (-c 2^30)|needs .* available; use a smaller -c|-c 1073741824" \
    "-c 0 takes the model's 2^30 context: beyond free memory|needs .* available|-c 0"; do
    IFS='|' read -r name pat c <<< "$how"
    check "$name" || continue
    if big=$(model q8_0 1 --ctx 1073741824); then
        # shellcheck disable=SC2086
        clover_error "$pat" -m "$big" --tokens 1,2 $c
    else
        fail "cannot generate the model"
    fi
done

# damaged files
if check "bad magic" && models; then
    printf 'GGUX' > "$TMP/magic.gguf" && tail -c +5 "$m" >> "$TMP/magic.gguf"
    clover_error "magic|not a gguf" -m "$TMP/magic.gguf" --tokens 1,2
fi
corrupt "version 2" "version" --version 2
for cut in "0 to 0 bytes" "10 to 10 bytes" "30 to 30 bytes (in the metadata)" "1000 to 1000 bytes" \
    "half in the middle of the data" "last by its last byte"; do
    check "truncated ${cut#* }" && models || continue
    size=$(wc -c < "$m")
    n=${cut%% *}
    [ "$n" = half ] && n=$((size / 2))
    [ "$n" = last ] && n=$((size - 1))
    head -c "$n" "$m" > "$TMP/trunc.gguf"
    clover_error "truncat|too small|past the end|remain|hold" -m "$TMP/trunc.gguf" --tokens 1,2
done
corrupt "huge key length" "truncat|corrupt|remain" --key-len 0x7fffffffffffffff
corrupt "huge string value length" "truncat|corrupt|remain" --str-len general.architecture 0x7ffffffffffffff0
corrupt "huge string array count" "strings|hold|corrupt" --arr-len tokenizer.ggml.tokens 0x7fffffffffffffff
corrupt "huge integer array count (size overflows)" "overflow|truncat|corrupt" --arr-len tokenizer.ggml.token_type 0x4000000000000001
corrupt "huge tensor count" "tensor|hold" --n-tensors 0x7fffffffffffffff
corrupt "huge metadata count" "metadata|hold" --n-kv 0x100000000
corrupt "unknown metadata value type" "type" --kv-type general.alignment 99
corrupt "alignment not a power of two" "alignment" --set general.alignment u32 48
corrupt "alignment 0" "alignment" --set general.alignment u32 0
corrupt "tensor dims product overflows" "overflow" --tensor blk.0.attn_gate.weight dims 2147483647,2147483647,2147483647,2147483647
corrupt "tensor with 5 dims" "dimension" --tensor output_norm.weight dims 256,1,1,1,1
corrupt "tensor dim 0" "dimension" --tensor output_norm.weight dims 0
corrupt "tensor data past EOF" "past the end|truncat" --tensor output_norm.weight offset 0x10000000000
corrupt "tensors overlap" "overlap" --tensor output_norm.weight offset 0
corrupt "misaligned tensor offset" "align" --tensor output_norm.weight add-offset 4
corrupt "misaligned tensor data (general.alignment 1)" "misaligned" --set general.alignment u32 1 --set general.pad str ab
corrupt "duplicate tensor name" "twice|duplicate" --tensor output_norm.weight name token_embd.weight
corrupt "missing tensor" "missing" --drop-tensor blk.1.ssm_out.weight
corrupt "row not a multiple of the block" "multiple|block" --tensor output.weight dims 250,1024
corrupt "wrong shape (expert_feed_forward_length edited)" "shape" --set qwen35moe.expert_feed_forward_length u32 512
corrupt "wrong shape (embedding_length edited)" "shape" --set qwen35moe.embedding_length u32 128
corrupt "unsupported tensor type (Q2_K)" "does not support" --tensor blk.0.attn_gate.weight type 10
corrupt "unknown tensor type id 99" "type" --tensor blk.0.attn_gate.weight type 99
corrupt "vocab size not matching the embedding" "shape|vocab" --drop-last tokenizer.ggml.tokens --drop-last tokenizer.ggml.token_type
corrupt "token_type array of the wrong length" "token_type" --drop-last tokenizer.ggml.token_type
corrupt "integer key of type string" "type|integer" --set qwen35moe.block_count str four
corrupt "block_count 0" "range|block_count" --set qwen35moe.block_count u32 0
corrupt "eos id out of range" "range|eos" --set tokenizer.ggml.eos_token_id u32 5000
corrupt "unsupported architecture" "architecture" --set general.architecture str llama
corrupt "missing required key" "missing|embedding" --del qwen35moe.embedding_length
corrupt "head_count not a multiple of head_count_kv" "multiple|head" --set qwen35moe.attention.head_count_kv u32 3
corrupt "tokenizer model not gpt2" "gpt2|tokenizer" --set tokenizer.ggml.model str llama
BASE=$tw corrupt "mask id out of range" "mask" --set tokenizer.ggml.mask_token_id u32 5000
BASE=$tw corrupt "mask id negative" "mask|range" --set tokenizer.ggml.mask_token_id i32 -5

# random damage to the header, metadata and tensor infos, and truncation at many offsets: never a
# crash, never more than one error line
damage "fuzz: 300 random header corruptions exit 0 or 1, one error line" random 300
damage "truncated at 200 offsets spread over the file" truncate 200
damage "truncated at every offset of the first 512 bytes" truncate-head 512

# Every row of README.md's table "Hostile and mistaken input" names a check of this group (its first
# column) that must have passed in this run.
if check "README table: every row is a passing check"; then
    awk '/^## Hostile and mistaken input$/ { on = 1; next } /^## / { on = 0 }
        on && /^\| / && !/^\| check/ { split($0, c, "|"); gsub(/^[ \t]+|[ \t]+$/, "", c[2]); gsub(/^`+|`+$/, "", c[2]); print c[2] }' README.md > "$TMP/rows"
    touch "$TMP/passed"
    missing=$(grep -vxF -f "$TMP/passed" "$TMP/rows" | head -n 5 | paste -sd';' -)
    if [ ! -s "$TMP/rows" ]; then
        fail "no rows"
    elif [ -n "$missing" ]; then
        fail "not passed: $missing"
    else
        pass "$(wc -l < "$TMP/rows") rows"
    fi
fi
