"""The page's three tabs: the default leaderboard, the customizable leaderboard, two models side by side.

Each handler is a plain function of the inputs (so the API and the tests call the same code) that never raises:
a problem with the input is a message on the page; anything else is logged and shown as one line.
"""

import logging
import os
import re
import threading
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported: no telemetry

import gradio as gr  # noqa: E402
import pandas as pd  # noqa: E402

from usl_assets.leaderboards.ranking import DEFAULT_METHOD  # noqa: E402
from usl_assets.page import inputs, views  # noqa: E402
from usl_assets.page.data import Cancelled, PageData  # noqa: E402
from usl_assets.settings import UslConfigError  # noqa: E402

log = logging.getLogger("usl.page")
EMPTY = pd.DataFrame()
DEFAULT_PROFILE_CHOICE = "(type your own)"


def problem_text(error: Exception) -> str:
    if isinstance(error, UslConfigError | Cancelled):
        return f"⚠️ {inputs.as_text(error)}"
    log.exception("page request failed")
    return f"⚠️ the request failed ({inputs.as_text(type(error).__name__)}); the server log has the details"


_DONE_OF = re.compile(r"(\d[\d,]*)/(\d[\d,]*)")


def progress_fraction(message: str) -> float | None:
    """How far a scoring log line ("embedded 1,024/21,735 responses, …") says the work is; None when it does not."""
    found = _DONE_OF.search(message)
    if not found:
        return None
    done, total = (int(part.replace(",", "")) for part in found.groups())
    return min(done / total, 1.0) if total else None


class Page:
    """Handlers over one PageData; per-session cancel flags."""

    def __init__(self, data: PageData):
        self.data = data
        self._cancel: dict[str, threading.Event] = {}

    # --- tab 1 -------------------------------------------------------------------------------------------------

    def show_default(self, pool: str, method: str):
        try:
            pool = inputs.checked_choice(pool, self.data.pools, "pool")
            method = inputs.checked_choice(method, self.data.methods[pool], "method")
            board = self.data.default_leaderboard(pool, method)
            chart = views.scores_chart(board, f"{pool} · default criteria · {method}")
            return (views.default_table(board), chart, views.validity_markdown(self.data.validity, pool),
                    f"{len(board.wide)} models · default criteria (each prompt's scenario profile) · {method}  \n"
                    f"{views.rank_legend(board, method)}")
        except Exception as error:  # noqa: BLE001 - every problem becomes a message on the page
            return EMPTY, None, "", problem_text(error)

    def pool_methods(self, pool: str):
        methods = self.data.methods.get(pool, [])
        return gr.update(choices=methods, value=DEFAULT_METHOD if DEFAULT_METHOD in methods else (methods or [None])[0])

    # --- tab 2 -------------------------------------------------------------------------------------------------

    def topic_choices(self, pool: str):
        if pool not in self.data.pools:
            return gr.update(choices=[], value=[]), gr.update(choices=[], value=[])
        scenarios = [(f"{group} › {s}", s) for group, names in self.data.scenarios_by_group(pool).items()
                     for s in names]
        return gr.update(choices=self.data.groups(pool), value=[]), gr.update(choices=scenarios, value=[])

    def profile_criteria(self, name: str):
        return "\n".join(self.data.profiles.get(name, [])) if name in self.data.profiles else gr.update()

    def show_custom(self, pool: str, groups: list[str], scenarios: list[str], criteria_text: str, method: str,
                    request: gr.Request | None = None, progress=gr.Progress(track_tqdm=True)):
        session = self._session(request)
        cancel = self._cancel.setdefault(session, threading.Event())
        cancel.clear()

        def heard(message: str) -> None:
            if cancel.is_set():
                raise Cancelled("cancelled: what was scored so far is kept, so the next try starts from there")
            progress(progress_fraction(message), desc=message)

        try:
            started = time.perf_counter()
            pool = inputs.checked_choice(pool, self.data.pools, "pool")
            topics = inputs.checked_topics([*(groups or []), *(scenarios or [])], self.data.topic_names(pool))
            criteria = inputs.checked_criteria(criteria_text)
            method = inputs.checked_choice(method, self.data.methods[pool], "method")
            progress(0, desc="scoring your criteria")
            result = self.data.custom_leaderboard(pool, topics, criteria, method, progress=True, log=heard)
            progress(1, desc="scored and ranked")
            seconds = time.perf_counter() - started
            header = (views.custom_header(result.board, self.data.version, method, result.cached, seconds)
                      + "  \n" + views.rank_legend(result.board, method))
            chart = views.scores_chart(result.board, f"{pool} · your {len(criteria)} criteria · {method}")
            return header, views.custom_table(result.board, result.default), chart, ""
        except Exception as error:  # noqa: BLE001
            return "", EMPTY, None, problem_text(error)

    def show_reading(self, criteria_text: str) -> str:
        """How the CRM reads the criteria in the box (shown under it once the leaderboard is computed); nothing for
        criteria the leaderboard refused (its status says why)."""
        try:
            criteria = inputs.checked_criteria(criteria_text)
        except UslConfigError:
            return ""
        try:
            return views.reading_markdown(self.data.read_criteria(criteria))
        except Exception as error:  # noqa: BLE001
            return problem_text(error)

    def cancel(self, request: gr.Request | None = None):
        """Stops this session's scoring after the current chunk and clears the table, header and chart, so no
        earlier criteria's leaderboard stays under the criteria box: (status, header, table, chart)."""
        self._cancel.setdefault(self._session(request), threading.Event()).set()
        return ("⚠️ cancelled: no leaderboard for these criteria; what was scored so far is kept, so pressing *Rank "
                "the models* again starts from there", "", EMPTY, None)

    # --- "Why?": one model's breakdown against the reference (both leaderboard tabs) -------------------------------

    @staticmethod
    def why_choices(table):
        """The shown table's models, in its order, for the "Why?" list; the last breakdown is cleared with it."""
        models = [str(m) for m in table["model"]] if isinstance(table, pd.DataFrame) and "model" in table else []
        return gr.update(choices=models, value=models[0] if models else None), ""

    def why_default(self, pool: str, method: str, model: str) -> str:
        """The breakdown of a model of the default tab's leaderboard, under each prompt's scenario criteria."""
        try:
            pool = inputs.checked_choice(pool, self.data.pools, "pool")
            method = inputs.checked_choice(method, self.data.methods[pool], "method")
            board = self.data.default_leaderboard(pool, method)
            model = inputs.checked_choice(model, board.wide["model"], "model")
            return views.why_markdown(self.data.explain(model, board, pool, []), self.data.version)
        except Exception as error:  # noqa: BLE001
            return problem_text(error)

    def why_custom(self, pool: str, groups: list[str], scenarios: list[str], criteria_text: str, method: str,
                   model: str) -> str:
        """The breakdown of a model of the custom tab's leaderboard: its pool, topics and criteria (the leaderboard
        is kept once ranked, so this scores nothing new unless the criteria changed since)."""
        try:
            pool = inputs.checked_choice(pool, self.data.pools, "pool")
            topics = inputs.checked_topics([*(groups or []), *(scenarios or [])], self.data.topic_names(pool))
            criteria = inputs.checked_criteria(criteria_text)
            method = inputs.checked_choice(method, self.data.methods[pool], "method")
            board = self.data.custom_leaderboard(pool, topics, criteria, method).board
            model = inputs.checked_choice(model, board.wide["model"], "model")
            return views.why_markdown(self.data.explain(model, board, pool, criteria), self.data.version)
        except Exception as error:  # noqa: BLE001
            return problem_text(error)

    @staticmethod
    def _session(request: gr.Request | None) -> str:
        return getattr(request, "session_hash", None) or "api"

    # --- tab 3 -------------------------------------------------------------------------------------------------

    def compare_choices(self, pool: str, topic: str | None):
        if pool not in self.data.pools:
            return gr.update(choices=[], value=None), gr.update(choices=[]), gr.update(choices=[]), gr.update()
        prompts = [(f"{pid} · {text[:90]}", pid) for pid, text in self.data.example_prompts(pool, topic or None)]
        models = self.data.models(pool)
        topics = [("any topic", ""), *[(t, t) for t in self.data.topic_names(pool)]]
        first = prompts[0][1] if prompts else None
        return (gr.update(choices=prompts, value=first), gr.update(choices=models, value=models[0]),
                gr.update(choices=models, value=models[-1]), gr.update(choices=topics, value=topic or ""))

    def compare(self, pool: str, prompt_id: str, model_a: str, model_b: str, criteria_text: str):
        try:
            pool = inputs.checked_choice(pool, self.data.pools, "pool")
            if not prompt_id:
                raise UslConfigError("pick a prompt first")
            models = [inputs.checked_choice(m, self.data.models(pool), "model") for m in (model_a, model_b)]
            criteria = inputs.checked_criteria(criteria_text) if inputs.criteria_lines(criteria_text) else []
            rows = self.data.compare(pool, str(prompt_id), models, criteria)
            a, b = rows.iloc[0], rows.iloc[1]
            under = (f"your {len(criteria)} criteria (tab 2)" if criteria
                     else f"the default criteria of {inputs.as_text(a['scenario'])}")
            verdict = views.compare_verdict(rows, under, self.data.temperature,
                                            getattr(self.data.scorer, "architecture", "neural"))
            return (a["prompt"], a["response"], f"reward {a['reward']:.3f}", b["response"],
                    f"reward {b['reward']:.3f}", verdict, a["response"], b["response"])
        except Exception as error:  # noqa: BLE001
            return "", "", "", "", "", problem_text(error), "", ""

    # --- the URL -----------------------------------------------------------------------------------------------

    def from_url(self, request: gr.Request | None = None):
        """?pool=…&method=…&topics=a,b&criteria=… preset the tabs; an unknown value is a message, not a crash."""
        params = dict(request.query_params) if request is not None else {}
        pool, messages = self.data.pools[0], []
        if "pool" in params:
            if params["pool"] in self.data.pools:
                pool = params["pool"]
            else:
                messages.append(problem_text(UslConfigError(
                    f"unknown pool {params['pool'][:80]!r} in the URL: showing {pool} (pools: "
                    f"{', '.join(self.data.pools)})")))
        methods = self.data.methods[pool]
        method = params.get("method", DEFAULT_METHOD if DEFAULT_METHOD in methods else methods[0])
        if method not in methods:
            messages.append(problem_text(UslConfigError(f"unknown method {method[:80]!r} in the URL")))
            method = DEFAULT_METHOD if DEFAULT_METHOD in methods else methods[0]
        groups, scenarios = [], []
        if params.get("topics"):
            try:
                topics = inputs.checked_topics(params["topics"], self.data.topic_names(pool))
                groups = [t for t in topics if t in self.data.groups(pool)]
                scenarios = [t for t in topics if t not in groups]
            except UslConfigError as error:
                messages.append(problem_text(error))
        criteria = params.get("criteria", "")[:inputs.MAX_INPUT_CHARS]
        table, chart, validity, status = self.show_default(pool, method)
        group_choices, scenario_choices = self.topic_choices(pool)
        return (gr.update(value=pool), gr.update(choices=methods, value=method), table, chart, validity,
                "\n\n".join([*messages, status]), gr.update(value=pool), {**group_choices, "value": groups},
                {**scenario_choices, "value": scenarios}, gr.update(value=criteria),
                gr.update(choices=methods, value=method))


def why_controls(tab: str):
    """Under a leaderboard: a list of its models, a "Why?" button, and where the breakdown shows."""
    with gr.Row(equal_height=True):
        model = gr.Dropdown([], label="Why does this model rank here? (its reward against the reference, by term)",
                            elem_id=f"why-model-{tab}", scale=4)
        run = gr.Button("Why?", elem_id=f"why-run-{tab}", scale=1)
    return model, run, gr.Markdown(elem_id=f"why-{tab}")


def build_app(data: PageData) -> gr.Blocks:
    page = Page(data)
    pools, first = data.pools, data.pools[0]
    with gr.Blocks(title="USL leaderboard", analytics_enabled=False) as app:
        gr.Markdown("# USL — the User-centric Subjective Leaderboard\nLLMs ranked by a Customizable Reward Model "
                    "under each prompt's scenario criteria, or under yours (Jia et al., 2025).")
        with gr.Tab("Default leaderboard", id="default"):
            with gr.Row():
                pool1 = gr.Dropdown(pools, value=first, label="Pool", elem_id="pool-default")
                method1 = gr.Dropdown(data.methods[first], label="Method", elem_id="method-default")
            status1 = gr.Markdown(elem_id="status-default")
            table1 = gr.Dataframe(interactive=False, label="Ranking (click a header to sort)",
                                  elem_id="table-default", max_height=700)
            why_model1, why_run1, why1 = why_controls("default")
            chart1 = gr.Plot(label="Scores with 95% intervals", elem_id="chart-default")
            validity1 = gr.Markdown(elem_id="validity")
        with gr.Tab("Customizable leaderboard", id="custom"):
            with gr.Row():
                pool2 = gr.Dropdown(pools, value=first, label="Pool", elem_id="pool-custom")
                method2 = gr.Dropdown(data.methods[first], label="Method", elem_id="method-custom")
                profile2 = gr.Dropdown([DEFAULT_PROFILE_CHOICE, *data.profiles], value=DEFAULT_PROFILE_CHOICE,
                                       label="Start from a named profile", elem_id="profile")
            # Every pool's topics to start with (what the API accepts); the load narrows them to the pool shown.
            groups2 = gr.CheckboxGroup(sorted({g for p in pools for g in data.groups(p)}),
                                       label="Topics: scenario groups", elem_id="groups")
            with gr.Accordion("Topics: single scenarios", open=False):
                scenarios2 = gr.CheckboxGroup(sorted({s for p in pools for s in data.topic_names(p)}
                                                     - {g for p in pools for g in data.groups(p)}),
                                              label="Scenarios (group › scenario)", elem_id="scenarios")
            criteria2 = gr.Textbox(label=f"Your criteria, one per line ({inputs.LIMITS_TEXT})", lines=5,
                                   max_lines=20, elem_id="criteria",
                                   placeholder="The answer comes first.\nCode examples are complete.")
            reading2 = gr.Markdown(elem_id="reading-custom")
            with gr.Row():
                run2 = gr.Button("Rank the models", variant="primary", elem_id="run-custom")
                cancel2 = gr.Button("Cancel", elem_id="cancel-custom")
            status2 = gr.Markdown(elem_id="status-custom")
            header2 = gr.Markdown(elem_id="header-custom")
            table2 = gr.Dataframe(interactive=False, label="Your leaderboard", elem_id="table-custom",
                                  max_height=700)
            why_model2, why_run2, why2 = why_controls("custom")
            chart2 = gr.Plot(label="Overall scores with 95% intervals", elem_id="chart-custom")
        with gr.Tab("Compare two models", id="compare"):
            with gr.Row():
                pool3 = gr.Dropdown(pools, value=first, label="Pool", elem_id="pool-compare")
                topic3 = gr.Dropdown([], label="Topic", elem_id="topic-compare")
                prompt3 = gr.Dropdown([], label="Prompt", elem_id="prompt-compare", scale=3)
            with gr.Row():
                model_a3 = gr.Dropdown([], label="Model A", elem_id="model-a")
                model_b3 = gr.Dropdown([], label="Model B", elem_id="model-b")
            run3 = gr.Button("Compare under the current criteria", variant="primary", elem_id="run-compare")
            verdict3 = gr.Markdown(elem_id="verdict")
            prompt_text3 = gr.Textbox(label="Prompt", interactive=False, lines=3, elem_id="prompt-text")
            with gr.Row():
                with gr.Column():
                    reward_a3 = gr.Markdown(elem_id="reward-a")
                    rendered_a3 = gr.Markdown(elem_id="rendered-a", sanitize_html=True, container=True)
                    response_a3 = gr.Textbox(label="Model A's response (raw text)", interactive=False, lines=6,
                                             elem_id="response-a")
                with gr.Column():
                    reward_b3 = gr.Markdown(elem_id="reward-b")
                    rendered_b3 = gr.Markdown(elem_id="rendered-b", sanitize_html=True, container=True)
                    response_b3 = gr.Textbox(label="Model B's response (raw text)", interactive=False, lines=6,
                                             elem_id="response-b")

        default_out = [table1, chart1, validity1, status1]
        # .input fires on a user's change only; the load below sets every component itself.
        why_list1, why_list2 = [why_model1, why1], [why_model2, why2]
        pool1.input(page.pool_methods, pool1, method1, api_name=False).then(
            page.show_default, [pool1, method1], default_out, api_name=False).then(
            page.why_choices, table1, why_list1, api_name=False)
        method1.input(page.show_default, [pool1, method1], default_out, api_name="default_leaderboard").then(
            page.why_choices, table1, why_list1, api_name=False)
        why_run1.click(page.why_default, [pool1, method1, why_model1], why1, api_name="why_default")
        pool2.input(page.topic_choices, pool2, [groups2, scenarios2], api_name=False)
        pool2.input(page.pool_methods, pool2, method2, api_name=False)
        profile2.input(page.profile_criteria, profile2, criteria2, api_name=False)
        running = run2.click(page.show_custom, [pool2, groups2, scenarios2, criteria2, method2],
                             [header2, table2, chart2, status2], api_name="custom_leaderboard")
        running.then(page.show_reading, criteria2, reading2, api_name="criteria_reading")
        running.then(page.why_choices, table2, why_list2, api_name=False)
        cancel2.click(page.cancel, None, [status2, header2, table2, chart2], cancels=[running], api_name=False).then(
            page.why_choices, table2, why_list2, api_name=False)
        why_run2.click(page.why_custom, [pool2, groups2, scenarios2, criteria2, method2, why_model2], why2,
                       api_name="why_custom")
        compare_lists = [prompt3, model_a3, model_b3, topic3]
        pool3.input(page.compare_choices, [pool3, topic3], compare_lists, api_name=False)
        topic3.input(page.compare_choices, [pool3, topic3], compare_lists, api_name=False)
        run3.click(page.compare, [pool3, prompt3, model_a3, model_b3, criteria2],
                   [prompt_text3, response_a3, reward_a3, response_b3, reward_b3, verdict3, rendered_a3, rendered_b3],
                   api_name="compare")
        app.load(page.from_url, None, [pool1, method1, *default_out, pool2, groups2, scenarios2, criteria2, method2],
                 api_name=False).then(page.why_choices, table1, why_list1, api_name=False)
        app.load(page.compare_choices, [pool3, topic3], compare_lists, api_name=False)
    return app

