"""A generation in a process of its own, for the test that kills it with SIGKILL and resumes it.

python -m usl_assets_tests.generation_worker URL STORE: answers test_responses_generation.resume_prompts() with
test_responses_generation.resume_settings(URL) into STORE, one request at a time, and prints the report's line.
"""

import sys
from pathlib import Path

from usl_assets.responses.generation import generate_answers
from usl_assets_tests.test_responses_generation import resume_prompts, resume_settings


def main(argv: list[str]) -> int:
    url, store = argv
    print(generate_answers(resume_prompts(), resume_settings(url), Path(store)).line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
