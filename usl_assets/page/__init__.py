"""The leaderboard web page (`usl serve`, `make serve`): a Gradio app over the published warehouse.

- data.py: what the page knows (pools, topics, rankings, profiles, responses) and how it scores new criteria: the
  CRM loaded once, an in-memory copy of the published warehouse's responses and caches, the same scoring and
  ranking functions as `usl leaderboard`.
- inputs.py: reading and checking what a user types or puts in the URL (never trusted, never injected).
- views.py: tables, chart and text the tabs show.
- app.py: the three tabs and their events; commands.py: `usl serve`.
"""
