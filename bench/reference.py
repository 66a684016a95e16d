#!/usr/bin/env python3
"""Benchmark inputs and the Python reference pipelines that `pnpm bench` times against st-convert.

    reference.py gen KIND OUT BYTES [N]   make an input of about BYTES bytes with the reference tools
                                          (safetensors: N tensors; st-sharded: a folder of shards
                                          of at most N bytes each, made by huggingface_hub)
    reference.py gen small-FORMAT OUT N   make N F32[2] tensors as FORMAT (safetensors, npz, flax,
                                          json, npy-folder: one .npy per tensor, safetensors-folder)
    reference.py run PIPELINE IN OUT      run one reference pipeline (what a Python user would type)
    reference.py same-tensors A B         exit 0 when two safetensors files hold the same tensors
                                          (names, dtypes, shapes, bytes), whatever their metadata

Inputs are made by the reference tools themselves (numpy, safetensors, flax) where memory allows;
files past 2 GiB are streamed to disk so that making an 8 GiB input does not need 16 GiB of RAM.
"""
import json
import struct
import sys

import numpy as np

BLOCK = 64 * 1024 * 1024  # bytes of random data generated at a time


def random_block(nbytes: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(nbytes // 4, dtype=np.float32).tobytes()


def write_stream(f, nbytes: int, seed: int = 0) -> None:
    block = random_block(min(BLOCK, nbytes), seed)
    left = nbytes
    while left:
        n = min(len(block), left)
        f.write(block[:n])
        left -= n


def shapes_for(nbytes: int, count: int = 4):
    """`count` F32 tensors that add up to about nbytes, as (rows, 1024) matrices."""
    rows = max(1, nbytes // 4 // 1024 // count)
    return [(rows, 1024)] * count


def gen_safetensors(out: str, nbytes: int, count: int = 4) -> None:
    # Laid out as the reference writer lays it out (same dtype: order by name), streamed to disk.
    header = {}
    offset = 0
    shapes = shapes_for(nbytes, count)
    for i, shape in enumerate(shapes):
        size = shape[0] * shape[1] * 4
        header[f"layer{i}.weight"] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        write_stream(f, offset)


def gen_many(out: str, count: int) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(1)
    tensors = {f"model.layers.{i // 10}.block.{i % 10}.weight": rng.standard_normal((4, 4)).astype(np.float32) for i in range(count)}
    save_file(tensors, out)


def gen_npy(out: str, nbytes: int, fortran: bool) -> None:
    rows = max(1, nbytes // 4 // 4096)
    array = np.lib.format.open_memmap(out, mode="w+", dtype=np.float32, shape=(rows, 4096), fortran_order=fortran)
    step = max(1, BLOCK // 4 // 4096)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        array[start:stop] = np.frombuffer(random_block((stop - start) * 4096 * 4, start), dtype=np.float32).reshape(stop - start, 4096)
    array.flush()


def gen_npz(out: str, nbytes: int, compressed: bool, fortran: bool = False) -> None:
    rng = np.random.default_rng(2)
    arrays = {}
    for i, shape in enumerate(shapes_for(nbytes)):
        if compressed:
            # Weights quantized to a few levels: compressible, as real checkpoints partly are.
            arrays[f"layer{i}.weight"] = (rng.integers(-8, 8, shape, dtype=np.int8).astype(np.float32) / 8)
        else:
            arrays[f"layer{i}.weight"] = rng.standard_normal(shape, dtype=np.float32)
        if fortran:
            arrays[f"layer{i}.weight"] = np.asfortranarray(arrays[f"layer{i}.weight"])
    (np.savez_compressed if compressed else np.savez)(out, **arrays)


def gen_flax(out: str, nbytes: int) -> None:
    from flax import serialization

    rng = np.random.default_rng(3)
    tree = {"params": {f"Dense_{i}": {"kernel": rng.standard_normal(shape, dtype=np.float32)} for i, shape in enumerate(shapes_for(nbytes))}}
    with open(out, "wb") as f:
        f.write(serialization.msgpack_serialize(tree))


def torch_state_dict(nbytes: int, count: int = 4) -> dict:
    """`count` random F32 torch tensors adding up to about nbytes, built by repeating one random
    block (so that an 8 GiB input does not cost 8 GiB of random number generation)."""
    import torch

    block = np.frombuffer(random_block(BLOCK, 5), dtype=np.float32)
    tensors = {}
    for i, shape in enumerate(shapes_for(nbytes, count)):
        n = shape[0] * shape[1]
        data = np.resize(block, n).reshape(shape)
        tensors[f"layer{i}.weight"] = torch.from_numpy(data)
    return tensors


def gen_torch(out: str, nbytes: int) -> None:
    """A pytorch_model.bin as torch.save writes it (the zip format)."""
    import torch

    torch.save(torch_state_dict(nbytes), out)


def gen_st_sharded(out: str, nbytes: int, shard_bytes: int) -> None:
    """A sharded safetensors checkpoint (16 tensors) in the folder `out`, by huggingface_hub."""
    import os

    from huggingface_hub import save_torch_state_dict

    os.makedirs(out, exist_ok=True)
    save_torch_state_dict(torch_state_dict(nbytes, 16), out, max_shard_size=shard_bytes)


def gen_gguf_f16(out: str, nbytes: int) -> None:
    """A GGUF of four F16 tensors (rows, 1024), about nbytes, written by gguf-py's GGUFWriter."""
    import gguf

    block = np.frombuffer(random_block(BLOCK, 6), dtype=np.float32).astype(np.float16)
    writer = gguf.GGUFWriter(out, "llama")
    for i, shape in enumerate(shapes_for(nbytes * 2)):  # 2 bytes a value: twice the F32 values
        writer.add_tensor(f"blk.{i}.ffn_up.weight", np.resize(block, shape[0] * shape[1]).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gen_gguf_q4_k(out: str, nbytes: int) -> None:
    """A GGUF of four Q4_K tensors (rows, 4096), about nbytes of blocks, written by gguf-py's GGUFWriter.

    gguf.quants.quantize cannot make Q4_K, so each 144-byte block is random bytes (any bits are valid
    6-bit scales and 4-bit quants) with its d and dmin, the first two f16, set to finite f16 values as a
    quantizer gives them (d > 0, dmin >= 0, both small)."""
    import gguf

    block_size, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q4_K]
    cols = 4096
    row_bytes = cols // block_size * type_size
    rows = max(1, nbytes // row_bytes // 4)
    rng = np.random.default_rng(7)
    writer = gguf.GGUFWriter(out, "llama")
    for i in range(4):
        blocks = rng.integers(0, 256, (rows * cols // block_size, type_size), dtype=np.uint8)
        scales = rng.uniform(1e-4, 1e-2, (len(blocks), 2)).astype(np.float16)
        blocks[:, :4] = scales.view(np.uint8).reshape(len(blocks), 4)
        writer.add_tensor(f"blk.{i}.ffn_up.weight", blocks.reshape(rows, row_bytes), raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gen_dcp(out: str, nbytes: int, split: str) -> None:
    """A torch.distributed.checkpoint folder of four F32 tensors (rows, 1024), about nbytes, saved by
    `torchrun --nproc_per_node=4` workers (gloo, CPU) as DTensors split by rows (Shard(0)) or columns
    (Shard(1)). Each rank builds only its own piece (DTensor.from_local), as in a training run."""
    import os
    import pathlib
    import shutil
    import subprocess

    shutil.rmtree(out, ignore_errors=True)
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=4", __file__, "dcp-worker", out, str(nbytes), split],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def dcp_worker(out: str, nbytes: int, split: str) -> None:
    """One rank of gen_dcp (run by torchrun)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    block = torch.from_numpy(np.frombuffer(random_block(BLOCK // world, 8 + rank), dtype=np.float32).copy())
    state = {}
    for i, (rows, cols) in enumerate(shapes_for(nbytes)):
        rows -= rows % world  # whole pieces on every rank
        local = (rows // world, cols) if split == "rows" else (rows, cols // world)
        piece = block.repeat(local[0] * local[1] // len(block) + 1)[: local[0] * local[1]].reshape(local)
        state[f"model.layers.{i}.weight"] = DTensor.from_local(piece, mesh, [Shard(0 if split == "rows" else 1)])
    dcp.save(state, checkpoint_id=out)
    dist.destroy_process_group()


def same_tensors(a: str, b: str) -> None:
    """Exit 0 when two safetensors files hold the same tensors (names, dtypes, shapes, bytes), whatever their metadata."""
    from safetensors import safe_open

    with safe_open(a, "np") as fa, safe_open(b, "np") as fb:
        if sorted(fa.keys()) != sorted(fb.keys()):
            raise SystemExit(f"names differ: {sorted(fa.keys())} against {sorted(fb.keys())}")
        for k in fa.keys():
            x, y = fa.get_tensor(k), fb.get_tensor(k)
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                raise SystemExit(f"{k} differs")


def small_names(count: int) -> list:
    """The tensor names of the many-small-tensors inputs: a layered model's, nested five deep for flax."""
    return [f"model.layers.{i // 10}.block.{i % 10}.weight" for i in range(count)]


def small_tensors(count: int) -> dict:
    data = np.random.default_rng(4).standard_normal((count, 2), dtype=np.float32)
    return dict(zip(small_names(count), data))


def gen_small(kind: str, out: str, count: int) -> None:
    import os

    from safetensors.numpy import save_file

    tensors = small_tensors(count)
    if kind == "safetensors":
        save_file(tensors, out)
    elif kind == "npz":
        np.savez(out, **tensors)
    elif kind == "flax":
        from flax import serialization, traverse_util

        with open(out, "wb") as f:
            f.write(serialization.msgpack_serialize(traverse_util.unflatten_dict({tuple(k.split(".")): v for k, v in tensors.items()})))
    elif kind == "json":
        with open(out, "w") as f:
            json.dump({k: {"dtype": "F32", "shape": list(v.shape), "data": v.tolist()} for k, v in tensors.items()}, f)
    elif kind == "npy-folder":
        os.makedirs(out, exist_ok=True)
        for k, v in tensors.items():
            np.save(os.path.join(out, f"{k}.npy"), v)
    elif kind == "safetensors-folder":
        os.makedirs(out, exist_ok=True)
        for k, v in tensors.items():
            save_file({k: v}, os.path.join(out, f"{k}.safetensors"))
    else:
        raise SystemExit(f"unknown kind small-{kind}")


NUMPY_OF = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}
SAFETENSORS_OF = {np.dtype(v): k for k, v in NUMPY_OF.items()}


def run_small(pipeline: str, src: str, out: str) -> None:
    """The many-small-tensors pipelines: the same work as st-convert's, each array touched."""
    import os

    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    if pipeline.startswith("small-"):
        run_small(pipeline[len("small-") :], src, out)
    elif pipeline == "st2st":
        save_file(load_file(src), out)
    elif pipeline == "npz2st":
        with np.load(src) as npz:
            save_file({k: npz[k] for k in npz.files}, out)
    elif pipeline == "st2npz":
        np.savez(out, **load_file(src))
    elif pipeline == "flax2st":
        from flax import serialization, traverse_util

        with open(src, "rb") as f:
            tree = serialization.msgpack_restore(f.read())
        save_file({".".join(k): v for k, v in traverse_util.flatten_dict(tree).items()}, out)
    elif pipeline == "st2flax":
        from flax import serialization, traverse_util

        tree = traverse_util.unflatten_dict({tuple(k.split(".")): v for k, v in load_file(src).items()})
        with open(out, "wb") as f:
            f.write(serialization.msgpack_serialize(tree))
    elif pipeline == "json2st":
        with open(src) as f:
            doc = json.load(f)
        doc.pop("__metadata__", None)
        save_file({k: np.array(v["data"], dtype=NUMPY_OF[v["dtype"]]).reshape(v["shape"]) for k, v in doc.items()}, out)
    elif pipeline == "st2json":
        with open(out, "w") as f:
            json.dump({k: {"dtype": SAFETENSORS_OF[v.dtype], "shape": list(v.shape), "data": v.tolist()} for k, v in load_file(src).items()}, f)
    elif pipeline == "npy2st":
        os.makedirs(out, exist_ok=True)
        for name in sorted(os.listdir(src)):
            stem = name[: -len(".npy")]
            save_file({stem: np.load(os.path.join(src, name))}, os.path.join(out, f"{stem}.safetensors"))
    elif pipeline == "st2npy":
        os.makedirs(out, exist_ok=True)
        for name in sorted(os.listdir(src)):
            for k, v in load_file(os.path.join(src, name)).items():
                np.save(os.path.join(out, f"{k}.npy"), v)
    elif pipeline == "info-safetensors":
        with safe_open(src, "np") as f:
            listing = [(k, f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()]
        print(len(listing))
    elif pipeline == "info-npz":
        with np.load(src) as npz:
            listing = [(k, npz[k].dtype, npz[k].shape) for k in npz.files]
        print(len(listing))
    elif pipeline == "info-flax":
        from flax import serialization, traverse_util

        with open(src, "rb") as f:
            flat = traverse_util.flatten_dict(serialization.msgpack_restore(f.read()))
        print(len([(k, v.dtype, v.shape) for k, v in flat.items()]))
    elif pipeline == "info-json":
        with open(src) as f:
            doc = json.load(f)
        print(len([(k, v["dtype"], v["shape"]) for k, v in doc.items() if k != "__metadata__"]))
    else:
        raise SystemExit(f"unknown pipeline small-{pipeline}")


def run(pipeline: str, src: str, out: str) -> None:
    from safetensors.numpy import load_file, save_file

    if pipeline.startswith("small-"):
        run_small(pipeline[len("small-") :], src, out)
    elif pipeline == "st2st":
        save_file(load_file(src), out)
    elif pipeline == "nanstats":
        # What `st-convert stats` computes, as a numpy user would: the nan-functions in float64.
        stats = {}
        for name, a in load_file(src).items():
            stats[name] = [float(np.nanmin(a)), float(np.nanmax(a)), float(np.nanmean(a, dtype=np.float64)), float(np.nanstd(a, dtype=np.float64)),
                           int(np.isnan(a).sum()), int(np.isposinf(a).sum()), int(np.isneginf(a).sum()), int((a == 0).sum())]
        with open(out, "w") as f:
            json.dump(stats, f)
    elif pipeline == "npy2st":
        save_file({"x": np.load(src)}, out)
    elif pipeline == "npz2st":
        with np.load(src) as npz:
            save_file({k: npz[k] for k in npz.files}, out)
    elif pipeline == "npz-load":
        with np.load(src) as npz:
            for k in npz.files:
                npz[k]
    elif pipeline == "npz-fortran2st":
        # save_file writes an array's memory as it lies: a Fortran-order one would come out
        # transposed under its C-order shape, so it is made C-contiguous first.
        with np.load(src) as npz:
            save_file({k: np.ascontiguousarray(npz[k]) for k in npz.files}, out)
    elif pipeline == "npz-contiguous":
        with np.load(src) as npz:
            for k in npz.files:
                np.ascontiguousarray(npz[k])
    elif pipeline == "fortran-contiguous":
        np.ascontiguousarray(np.load(src))
    elif pipeline == "fortran2st":
        save_file({"x": np.ascontiguousarray(np.load(src))}, out)
    elif pipeline == "flax2st":
        from flax import serialization, traverse_util

        with open(src, "rb") as f:
            tree = serialization.msgpack_restore(f.read())
        save_file({".".join(k): v for k, v in traverse_util.flatten_dict(tree).items()}, out)
    elif pipeline == "torch2st":
        # What a Python user runs: the whole checkpoint in memory, then safetensors' writer.
        import torch
        from safetensors.torch import save_file as save_torch

        state = torch.load(src, map_location="cpu", weights_only=True)
        save_torch({k: v.contiguous() for k, v in state.items()}, out, metadata={"format": "pt"})
    elif pipeline == "st2torch":
        import torch
        from safetensors.torch import load_file as load_torch

        torch.save(load_torch(src), out)
    elif pipeline == "st2npy":
        (array,) = load_file(src).values()
        np.save(out, array)
    elif pipeline == "st2npz":
        np.savez(out, **load_file(src))
    elif pipeline == "st2npz-deflated":
        np.savez_compressed(out, **load_file(src))
    elif pipeline == "st2flax":
        from flax import serialization, traverse_util

        tree = traverse_util.unflatten_dict({tuple(k.split(".")): v for k, v in load_file(src).items()})
        with open(out, "wb") as f:
            f.write(serialization.msgpack_serialize(tree))
    elif pipeline == "cast-bf16":
        import torch
        from safetensors.torch import load_file as load_torch
        from safetensors.torch import save_file as save_torch

        save_torch({k: v.to(torch.bfloat16) for k, v in load_torch(src).items()}, out)
    elif pipeline in ("reshard", "merge"):
        import os

        from safetensors.torch import load_file as load_torch
        from safetensors.torch import save_file as save_torch

        with open(src) as f:
            index = json.load(f)
        state = {}
        for shard in sorted(set(index["weight_map"].values())):
            state.update(load_torch(os.path.join(os.path.dirname(src), shard)))
        if pipeline == "merge":
            save_torch(state, out, metadata={"format": "pt"})
        else:
            from huggingface_hub import save_torch_state_dict

            os.makedirs(out, exist_ok=True)
            save_torch_state_dict(state, out, max_shard_size="1GB")
    elif pipeline == "gguf2st":
        # gguf-py's reader maps the file; each tensor's data is its numpy view (numpy's shape order).
        import gguf

        reader = gguf.GGUFReader(src)
        save_file({t.name: t.data for t in reader.tensors}, out)
    elif pipeline == "gguf-dequant2st":
        import gguf

        reader = gguf.GGUFReader(src)
        save_file({t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}, out)
    elif pipeline == "st2gguf-q8_0":
        # What st-convert writes for a safetensors input without metadata: arch "unknown", the
        # tensors in the file's order, every one quantized (all are 2-D with whole 32-value blocks).
        import gguf

        writer = gguf.GGUFWriter(out, "unknown")
        for k, v in load_file(src).items():
            writer.add_tensor(k, gguf.quants.quantize(v, gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    elif pipeline == "dcp2st":
        # torch's own consolidation (the whole model in memory), then safetensors' writer.
        import os

        import torch
        from safetensors.torch import save_file as save_torch
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        scratch = f"{out}.pt"
        dcp_to_torch_save(src, scratch)
        state = torch.load(scratch, weights_only=True)
        os.remove(scratch)
        save_torch({k: v.contiguous() for k, v in state.items()}, out)
    elif pipeline == "keys":
        from safetensors import safe_open

        with safe_open(src, "np") as f:
            print(len(list(f.keys())))
    elif pipeline == "json-dumps":
        tensors = load_file(src)
        with open(out, "w") as f:
            f.write(json.dumps({k: v.tolist() for k, v in tensors.items()}))
    else:
        raise SystemExit(f"unknown pipeline {pipeline}")


def main() -> None:
    command, *args = sys.argv[1:]
    if command == "gen":
        kind, out, nbytes = args[0], args[1], int(args[2])
        if kind.startswith("small-"):
            gen_small(kind[len("small-") :], out, nbytes)
        elif kind == "safetensors":
            gen_safetensors(out, nbytes, int(args[3]) if len(args) > 3 else 4)
        elif kind == "torch":
            gen_torch(out, nbytes)
        elif kind == "st-sharded":
            gen_st_sharded(out, nbytes, int(args[3]))
        elif kind == "many":
            gen_many(out, nbytes)
        elif kind in ("npy", "npy-fortran"):
            gen_npy(out, nbytes, kind == "npy-fortran")
        elif kind in ("npz", "npz-compressed", "npz-compressed-fortran"):
            gen_npz(out, nbytes, kind != "npz", kind == "npz-compressed-fortran")
        elif kind == "flax":
            gen_flax(out, nbytes)
        elif kind == "gguf-f16":
            gen_gguf_f16(out, nbytes)
        elif kind == "gguf-q4_k":
            gen_gguf_q4_k(out, nbytes)
        elif kind in ("dcp-rows", "dcp-columns"):
            gen_dcp(out, nbytes, kind[len("dcp-") :])
        else:
            raise SystemExit(f"unknown kind {kind}")
    elif command == "run":
        run(*args)
    elif command == "dcp-worker":
        dcp_worker(args[0], int(args[1]), args[2])
    elif command == "same-tensors":
        same_tensors(*args)
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
