"""`/v1/rerank` (and llama-server's `/rerank`) against a real kiln (issue 20, section 3): the
Jina / Cohere shape, scores from the reranker prompt's yes/no logprobs, sorted, `top_n`,
`return_documents`, and 400s naming the field. A few documents, prefill only: seconds."""
from __future__ import annotations

import httpx2 as httpx

QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital and largest city of France.",
        "Bananas are yellow fruit that grow in bunches.",
        {"text": "The Eiffel Tower stands in Paris, France."}]


def rerank(kiln, path="/v1/rerank", **body):
    r = httpx.post(kiln.base_url + path, json=body, timeout=60)
    return r


def test_rerank_scores_sorts_and_returns_documents(kiln, model_id):
    r = rerank(kiln, model=model_id, query=QUERY, documents=DOCS, return_documents=True)
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["object"] == "list" and j["model"] == model_id and j["id"].startswith("rerank-")
    res = j["results"]
    assert sorted(x["index"] for x in res) == [0, 1, 2]
    scores = [x["relevance_score"] for x in res]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    texts = [d if isinstance(d, str) else d["text"] for d in DOCS]
    for x in res:
        assert x["document"]["text"] == texts[x["index"]]
    assert j["usage"]["prompt_tokens"] > 3 * 20
    by_index = {x["index"]: x["relevance_score"] for x in res}
    # The answer ranks above the unrelated document.
    assert by_index[0] > by_index[1], res
    # top_n keeps the best; without return_documents there are none; /rerank is the same
    # route; a document scored alone scores as in the batch.
    top = rerank(kiln, "/rerank", query=QUERY, documents=DOCS, top_n=1).json()["results"]
    assert len(top) == 1 and top[0]["index"] == res[0]["index"] and "document" not in top[0]
    assert abs(top[0]["relevance_score"] - res[0]["relevance_score"]) < 1e-3
    alone = rerank(kiln, query=QUERY, documents=[DOCS[1]]).json()["results"][0]
    assert alone["index"] == 0 and abs(alone["relevance_score"] - by_index[1]) < 1e-3


def test_rerank_bad_requests_name_the_field(kiln):
    for body, param in [
        ({"query": QUERY, "documents": []}, "documents"),
        ({"query": QUERY, "documents": ["a"] * 65}, "documents"),
        ({"query": QUERY, "documents": ["a"], "top_n": 0}, "top_n"),
        ({"query": QUERY, "documents": [5]}, "documents[0]"),
        ({"documents": ["a"]}, None),
    ]:
        r = rerank(kiln, **body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error", err
        if param is not None:
            assert err["param"] == param, (body, err)
