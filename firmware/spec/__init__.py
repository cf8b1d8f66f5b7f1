"""firmware/spec"""
