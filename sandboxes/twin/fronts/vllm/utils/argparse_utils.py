"""vLLM's FlexibleArgumentParser, the parts a command line meets (vllm 0.25.1 vllm/utils/argparse_utils.py):
underscores and dashes are the same in a flag's name (`--max_model_len` is `--max-model-len`), `--flag=value` is
split at the first `=`, and `vllm serve --model X` moves X to the positional model argument with vLLM's warning.
As in vLLM, argparse's prefix matching stays on (an unambiguous abbreviation of a flag is accepted).
Does not cover config files (--config) or the dotted JSON flags (--flag.key value).
"""

import argparse
import re
import sys

from vllm.logger import init_logger

logger = init_logger(__name__)
FLAG_NAME = re.compile(r"(?<=--)[^\.=]*")


class FlexibleArgumentParser(argparse.ArgumentParser):
    """ArgumentParser that allows both underscore and dash in names."""

    def parse_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        if args and args[0] == "serve":
            args = self._model_first(args)
        processed = []
        for arg in args:
            if arg.startswith("--"):
                key, equals, value = arg.partition("=")
                key = FLAG_NAME.sub(lambda match: match.group(0).replace("_", "-"), key, count=1)
                processed.append(key + equals + value)
            else:
                processed.append(arg)
        return super().parse_args(processed, namespace)

    @staticmethod
    def _model_first(args: list[str]) -> list[str]:
        index = next((i for i, arg in enumerate(args) if re.match(r"^--model(=.+|$)", arg)), None)
        if index is None:
            return args
        logger.warning(
            "With `vllm serve`, you should provide the model as a positional argument or in a config file "
            "instead of via the `--model` option. The `--model` option will be removed in a future version."
        )
        if args[index] == "--model":
            return ["serve", args[index + 1], *args[1:index], *args[index + 2 :]]
        return ["serve", args[index].removeprefix("--model="), *args[1:index], *args[index + 1 :]]
