# unit — build/unit and build/unit-avx2: half precision, dequantisation, activation rounding, dot products vs ggml
# seconds: 3
# As built for this CPU, and for AVX2 without AVX-512 (the kernels' other code paths).
for u in "$UNIT" "$UNIT_AVX2"; do
    check "$(basename "$u")" || continue
    if $TO "$u" > "$TMP/unit.out" 2>&1; then
        pass "$(tail -n 1 "$TMP/unit.out")"
    else
        fail "$(grep -m 3 '^FAIL\|error' "$TMP/unit.out" | tr '\n' ';') $(tail -n 1 "$TMP/unit.out")"
    fi
done
