"""The `vllm` command, as vllm 0.25.1's (vllm/entrypoints/cli/main.py): `vllm serve [model_tag] [options]`,
`vllm bench latency [options]` (vllm/entrypoints/cli/benchmark/latency.py over vllm/benchmarks/latency.py) and
`vllm --version`; with no subcommand it prints its help. The other subcommands (bench serve and throughput, chat,
complete, collect-env, run-batch, launch) are not part of this package. Does not cover the serve flags (serve.py,
arg_utils.py).
"""

import importlib.metadata
import sys

from vllm import __version__
from vllm.benchmarks import latency
from vllm.entrypoints.cli import serve
from vllm.utils.argparse_utils import FlexibleArgumentParser


def _installed_version() -> str:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:  # a --local layout, whose dist-info is not on the path
        return __version__


def make_parser() -> FlexibleArgumentParser:
    parser = FlexibleArgumentParser(description="vLLM CLI")
    parser.add_argument("-v", "--version", action="version", version=_installed_version())
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve.subparser_init(subparsers).set_defaults(dispatch_function=serve.cmd)
    bench = subparsers.add_parser("bench", help="vLLM bench subcommand.", usage="vllm bench <bench_type> [options]")
    kinds = bench.add_subparsers(required=True, dest="bench_type")
    help_text = "Benchmark the latency of a single batch of requests."
    latency_parser = kinds.add_parser("latency", help=help_text, description=help_text)
    latency.add_cli_args(latency_parser)
    latency_parser.set_defaults(dispatch_function=latency.main)
    return parser


def main() -> None:
    parser = make_parser()
    args = parser.parse_args()
    if hasattr(args, "dispatch_function"):
        sys.exit(args.dispatch_function(args))
    parser.print_help()


if __name__ == "__main__":
    main()
