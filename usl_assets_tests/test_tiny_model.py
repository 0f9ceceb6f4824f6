import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def test_tiny_backbone_loads_through_from_pretrained_and_scores_the_last_real_token(tiny_backbone):
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_backbone).eval()
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "criteria"}, {"role": "user", "content": "hi"}], tokenize=False
    )
    assert text.startswith("<|im_start|>system\ncriteria<|im_end|>")
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    batch = tokenizer([text, text + " more words here"], padding=True, return_tensors="pt")
    with torch.inference_mode():
        padded = model(**batch).logits[0, 0]
        alone = model(**tokenizer([text], return_tensors="pt")).logits[0, 0]
    assert torch.allclose(padded, alone, atol=1e-5)
