"""The property words a wish names (crm/criteria_vocabulary.py): which property, which way, negations, limits, and
the wish clause of a long line over the user's situation."""

import pytest

from usl_assets.crm import criteria_vocabulary


@pytest.mark.parametrize("text, reading", [
    ("Use bullet points and headings.", {"structure:more": 1.0}),
    ("No bullet points.", {"structure:less": 1.0}),
    ("Don't be brief.", {"length:more": 1.0}),  # a negation turns the term around once
    ("Avoid answers that lack concrete data.", {"numbers:more": 1.0}),  # twice: back
    ("Answer in no more than 50 words.", {"length:less": 1.0}),  # a limit is no negation
    ("Keep every sentence under 15 words.", {"sentence_length:less": 1.0}),  # a limit on sentences
    ("Use 0 headings.", {"structure:less": 1.0}),  # a zero count
    ("Use bold 0 times.", {"emphasis:less": 1.0}),  # wherever it stands in the clause
    ("The ideal reply is general and example-free.", {"examples:less": 1.0}),
    ("Include at least one code block.", {"code:more": 1.0}),  # a code block is not one paragraph
    ("No preamble like 'Great question!' please.", {"direct_answer:more": 1.0}),  # quoted, no clause break
    ("Start by acknowledging my question.", {"direct_answer:less": 1.0}),  # "my question" is not a question
    ("Short answers with bullet points.", {"length:less": 0.5, "structure:more": 0.5}),
    ("Explain it to me like I'm five.", {}),  # names no property
    ('<div class="x"><code>ipsum</code><table><tr><td>42</td></tr></table></div>', {}),  # markup is no wish
    ("Wrap the code in <code> tags.", {"code:more": 1.0}),
    ("Please do not include any code, scripts, or command-line snippets.", {"code:less": 1.0}),  # a negated list
    ("No hand-waving, include real code.", {"code:more": 1.0}),  # an imperative after the comma is no list item
    ("No bullets, no headings.", {"structure:less": 1.0}),  # each item's own negation counts once
    ("Please aim for at least 400 words per answer.", {"length:more": 1.0}),  # words per answer, not per sentence
    ("Skip the warm-up and lead with the answer.", {"direct_answer:more": 1.0}),  # "and lead": a new clause
    ("Would you mind dropping the bold?", {"emphasis:less": 1.0}),  # negators in -ing form
    ("Leaving out the scripts would help.", {"code:less": 1.0}),
    ("Paragraphs of at most two sentences.", {"paragraphs:more": 1.0}),  # a limit per paragraph, not on length
    ("Show at least ten lines of code.", {"code:more": 1.0}),  # lines of code are no length limit
    ("Two lines, tops.", {"length:less": 1.0}),
    ("Don't bury the lede.", {"direct_answer:more": 1.0}),
    ("Give the background first and the verdict at the end.", {"direct_answer:less": 1.0}),
    ("Without an example I can't follow.", {"examples:more": 1.0}),  # what the user cannot do without: wanted
    ("No examples that I can't relate to.", {"examples:less": 1.0}),  # a relative clause is no second turn
    ("It reads like a telegram, full stop.", {"sentence_length:less": 1.0}),  # "full stop" is no fullness
    ("Show your work.", {"steps:more": 1.0}),
    ("Zero steps, just the outcome.", {"steps:less": 1.0}),
    ("Ask me when something is unclear.", {"questions:more": 1.0}),
    ("I asked a question, I want a short answer.", {"length:less": 1.0}),  # the user's question is no wish
])
def test_the_words_a_wish_names_are_read_as_their_property_and_direction(text, reading):
    assert criteria_vocabulary.read(text) == reading


def test_a_property_named_both_ways_as_often_is_read_as_neither():
    assert criteria_vocabulary.read("Short, but also long.") == {}


@pytest.mark.parametrize("text, wish", [
    ("please include a snippet I can drop into my project", True),
    ("keep every sentence short and simple", True),
    ("I'd rather have one well-knit paragraph", True),
    ("I'm debugging this at work and don't have time to translate explanations into code", False),
])
def test_a_wish_is_told_from_the_user_s_situation(text, wish):
    assert criteria_vocabulary.is_wish(text) is wish


@pytest.mark.parametrize("text, complaint", [
    ("Everything comes back as a slide deck of bullet points and headers", True),
    ("The replies I get are always so short that I feel like I'm missing half the picture.", True),
    ("I keep getting chunks of code thrown at me.", True),
    ("It's frustrating when everything is written as running text.", True),
    ("The response is brief.", False),  # a description of the wanted answer
    ("Answers should always be short.", False),  # worded as a wish
    ("Answers that start with a warm greeting are preferred.", False),
    ("You guess what I meant instead of checking.", True),  # what "you" do, not what you should do
    ("Half of every reply is in bold.", True),
    ("Right now it's all one block of text.", True),
    ("I have to scroll past the intro to find the answer.", True),  # the user's chore, not a rule
    ("I get interrogated before I get an answer.", True),
    ("I get lost in long sentences.", False),  # a dislike (criteria_prototypes.disliked), not what they get
    ("You should keep it short.", False),
])
def test_a_complaint_about_what_the_user_gets_is_told_from_a_description_of_what_they_want(text, complaint):
    assert criteria_vocabulary.complaint(text) is complaint
