"""`vllm serve [model_tag] [options]`: vLLM's serve subcommand over the engine.

The server's own flags are vllm 0.25.1's (vllm/entrypoints/openai/cli_args.py: --host, default None, which binds
every interface; --port, default 8000; --uvicorn-log-level; --disable-uvicorn-access-log), the engine's are
arg_utils.py's. Before the engine starts the API server logs the non-default args (entrypoints/serve/utils/
api_utils.py), the resolved architecture and max model length (config/model.py) and, for an MTP draft longer than
the checkpoint's MTP layers, vLLM's warning that one layer is run several times (config/speculative.py). An error in
the flags or the checkpoint's config is a traceback in the API server; a failed engine start-up is the engine core's
(engine/wording.py). Exit status 1 on either. Does not cover the engine (twin/engine.py).
"""

import argparse
import json
import traceback
from pathlib import Path

from twin.engine import ServeOptions, run

from vllm import __version__
from vllm.engine import arg_utils
from vllm.engine.wording import VllmWording
from vllm.logger import init_logger, plain

logger = init_logger(__name__)
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"  # vLLM's EngineArgs.model default
DESCRIPTION = "Launch a local OpenAI-compatible API server to serve LLM completions via HTTP."


def subparser_init(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve", help=DESCRIPTION, description=DESCRIPTION, usage="vllm serve [model_tag] [options]"
    )
    parser.add_argument(
        "model_tag", nargs="?", default=None, help="The model tag to serve (optional if specified in config)"
    )
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=8000)
    levels = ["critical", "error", "warning", "info", "debug", "trace"]
    parser.add_argument("--uvicorn-log-level", default="info", choices=levels)
    parser.add_argument("--disable-uvicorn-access-log", action=argparse.BooleanOptionalAction, default=False)
    arg_utils.add_cli_args(parser)
    return parser


def _non_default(args: argparse.Namespace) -> dict:
    defaults = vars(subparser_init(argparse.ArgumentParser().add_subparsers()).parse_args([]))
    return {key: value for key, value in vars(args).items() if key in defaults and value != defaults[key]}


def engine_options(args: argparse.Namespace) -> tuple[dict, ServeOptions] | None:
    """The checkpoint's config and the engine's options for these flags; None when either is wrong, its traceback
    printed as the API server prints it."""
    try:
        config = json.loads((Path(args.model) / "config.json").read_text()) | (args.hf_overrides or {})
        return config, arg_utils.serve_options(args, config)
    except Exception:
        for line in traceback.format_exc().rstrip("\n").splitlines():
            plain(line)
        return None


def cmd(args: argparse.Namespace) -> int:
    if args.model_tag is not None:
        args.model = args.model_tag
    args.model = args.model or DEFAULT_MODEL
    logger.info(f"non-default args: {_non_default(args)}")
    read = engine_options(args)
    if read is None:
        return 1
    config, options = read
    logger.info(f"Resolved architecture: {config['architectures'][0]}")
    logger.info(f"Using max model len {options.context_length or config['max_position_embeddings']}")
    if options.spec_steps > int(config.get("num_nextn_predict_layers") or 0) > 0:
        logger.warning(
            "Enabling num_speculative_tokens > 1 will run multiple times of forward on same MTP layer"
            ",which may result in lower acceptance rate"
        )
    front_args = {key: value for key, value in vars(args).items() if key != "dispatch_function"}
    wording = VllmWording(options, config, args.attention_backend)
    return run(options, wording, front_args | {"version": __version__})
